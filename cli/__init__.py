"""The ``segfactory`` command line.

Each area registers its commands from its own module; heavy libraries (torch, onnxruntime,
langgraph) are imported inside the command functions that need them, so ``--help`` is fast.
"""

from __future__ import annotations

import sys
from typing import Protocol, cast

import typer

from cli import (
    agents_cmds,
    analysis_cmds,
    audit_cmds,
    challenge_cmds,
    console_cmds,
    controls_cmds,
    curate_cmds,
    data_cmds,
    gate_cmds,
    home_cmds,
    label_cmds,
    realism_cmds,
    runner_cmds,
    sandbox_cmds,
    vision_cmds,
)
from segfactory.errors import SegfactoryError

app = typer.Typer(
    name="segfactory",
    help="An experiment factory for segmentation models whose improvements can be trusted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (
    home_cmds,
    data_cmds,
    vision_cmds,
    analysis_cmds,
    gate_cmds,
    sandbox_cmds,
    audit_cmds,
    agents_cmds,
    controls_cmds,
    runner_cmds,
    curate_cmds,
    console_cmds,
    challenge_cmds,
    realism_cmds,
    label_cmds,
):
    module.register(app)


@app.callback()
def _global(
    log_json: bool = typer.Option(False, "--log-json", help="Logs on stderr as one JSON object a line."),
) -> None:
    """An experiment factory for segmentation models whose improvements can be trusted."""
    if log_json:
        from segfactory.logs import configure

        configure(json_lines=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; a SegfactoryError becomes one line on stderr and its exit code."""
    from segfactory.logs import configure

    configure()  # readable, or JSON lines when SEGFACTORY_LOG_JSON is set; --log-json switches later
    try:
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:  # click returns `typer.Exit(code)` here instead of raising
            return code
    except SegfactoryError as exc:
        sys.stderr.write(f"segfactory: error: {exc}\n")
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("segfactory: aborted\n")
        return 130
    except Exception as exc:  # usage errors: a missing or malformed option, an unknown command
        if isinstance(exc, _usage_errors()):
            usage = cast(_UsageError, exc)
            sys.stderr.write(f"segfactory: error: {usage.format_message()} (see --help)\n")
            return int(usage.exit_code)
        raise
    return 0


class _UsageError(Protocol):
    exit_code: int

    def format_message(self) -> str: ...


def _usage_errors() -> tuple[type[Exception], ...]:
    """The exception bases of command-line usage errors. Typer from 0.29 on parses with its own
    copy of click, whose errors are ``typer.TyperException``s and not click's; older Typer raises
    click's own."""
    import click

    own = getattr(typer, "TyperException", None)
    return (click.exceptions.ClickException, *([own] if own is not None else []))
