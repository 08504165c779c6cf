"""CLI command ``console``: serve the web console for people. See docs/cli.md and docs/console.md."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from audit import AuditLog
from audit.anchor import gate_anchor_store
from cli._common import HomeOpt, home_for
from cli._drop import rerun_as_orchestrator
from console import Auth, create_app, make_interpreter
from segfactory.home import Home

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765  # the console's default TCP port
TOKEN_ENV = "SEGFACTORY_CONSOLE_TOKEN"  # a fixed token (compose, scripts); else a random one is made
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("console")(console_cmd)


def console_cmd(
    home: HomeOpt = None,
    port: Annotated[int, typer.Option("--port", help="TCP port to listen on.")] = DEFAULT_PORT,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; anything but loopback is for containers.")
    ] = "127.0.0.1",
    interpreter: Annotated[
        str,
        typer.Option(
            "--interpreter",
            help="Reads chat replies: rules, or an LLM: openai:MODEL | anthropic:MODEL | local:URL.",
        ),
    ] = "rules",
) -> None:
    """Serve the console (runs, approvals chat, label review, audit log); prints its login link."""
    import uvicorn

    resolved = home_for(home)

    dropped = rerun_as_orchestrator(resolved)  # started as root: the console serves as `segfactory`
    if dropped is not None:
        raise typer.Exit(dropped)
    if host not in LOOPBACK:
        sys.stderr.write(
            f"warning: the console listens on {host}, not loopback; only do this inside a container "
            "whose port is published to 127.0.0.1\n"
        )
    auth = Auth(os.environ.get(TOKEN_ENV) or None)
    with ExitStack() as stack:
        store = _anchor_store(stack, resolved)
        sink = stack.enter_context(AuditLog(resolved, store))
        app = create_app(
            resolved,
            sink,
            auth=auth,
            anchor=(lambda: (store.get(), True)) if store else None,
            interpreter=make_interpreter(interpreter, sink),
        )
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        typer.echo(
            f"segfactory console for {resolved.root}\nopen: http://{shown}:{port}/login?token={auth.token}"
        )
        uvicorn.run(app, host=host, port=port, log_level="warning")


def _anchor_store(stack: ExitStack, home: Home) -> Any:
    """The served gate's anchor store when its socket answers, else None (said on stderr)."""
    sock: Path = home.root / "gate-run" / "gate.sock"
    if not sock.exists():
        sys.stderr.write(
            f"no gate serving at {sock}: people's decisions are audited, the chain head is anchored "
            "by the next writer that has the gate, and the banner says the anchor was not checked\n"
        )
        return None

    return stack.enter_context(gate_anchor_store(home))
