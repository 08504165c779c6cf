"""CLI commands for sandbox: ``sandbox build | verify | exec``. See docs/cli.md for the contract."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer

from audit import AuditLog
from cli._common import HomeOpt, JsonOpt, console, emit_json
from sandbox import DockerBackend, SandboxSpec, build_image, get_backend
from segfactory.errors import UsageError
from segfactory.home import Home
from segfactory.text import inert
from segfactory.units import parse_duration

if TYPE_CHECKING:
    from sandbox import SandboxBackend, SandboxEvent, SandboxResult, VerifyReport

sandbox_app = typer.Typer(
    help="Sandboxes for agent code: build the image, verify the policy, run a command.", no_args_is_help=True
)
BackendArg = Annotated[str, typer.Option("--backend", help="Sandbox backend: docker or bwrap.")]


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(sandbox_app, name="sandbox")


def _backend(name: str) -> SandboxBackend:
    try:
        backend = get_backend(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    backend.check_available()
    return backend


def _print_report(report: VerifyReport) -> None:
    out = console()
    for check in report.checks:
        mark = "[green]ok[/green]" if check.ok else "[red]FAIL[/red]"
        out.print(f"{mark:>20}  {check.name}")
    out.print(
        f"sandbox verify ({report.backend}): {'ok' if report.ok else 'FAILED'} in {report.duration_s:.1f}s"
    )


def _finish_verify(report: VerifyReport, as_json: bool, extra: Mapping[str, object] | None = None) -> None:
    if as_json:
        emit_json({**(extra or {}), **report.model_dump(mode="json")})
    else:
        _print_report(report)
    if not report.ok:
        failed = ", ".join(c.name for c in report.checks if not c.ok)
        sys.stderr.write(f"segfactory: error: sandbox verify ({report.backend}) failed: {failed}\n")
        raise typer.Exit(1)


@sandbox_app.command("build")
def build(
    home: HomeOpt = None,
    as_json: JsonOpt = False,
    from_dockerfile: Annotated[
        bool, typer.Option("--from-dockerfile", help="docker build sandbox/Dockerfile.")
    ] = False,
) -> None:
    """Build the docker image (docker import of a minimal root, no registry), then verify it."""
    backend = _backend("docker")
    assert isinstance(backend, DockerBackend)
    built = build_image(backend.api(), backend.policy, from_dockerfile=from_dockerfile)
    _finish_verify(backend.verify(home), as_json, {"build": built})


@sandbox_app.command("verify")
def verify(home: HomeOpt = None, backend: BackendArg = "docker", as_json: JsonOpt = False) -> None:
    """Start a real sandbox and check the policy from inside; exits 1 on any deviation."""
    _finish_verify(_backend(backend).verify(home), as_json)


def _audit_log(home: Path | None) -> Any:
    """The home's audit log, or None (said on stderr) when there is no home yet."""
    resolved = Home.resolve(home)
    if not resolved.exists():
        sys.stderr.write(f"no home at {resolved.root}: this exec is not audited (run `segfactory init`)\n")
        return None

    return AuditLog(resolved, None)  # anchored by the next writer that holds the gate's anchor


@sandbox_app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    home: HomeOpt = None,
    backend: BackendArg = "docker",
    workspace: Annotated[
        Path | None, typer.Option("--workspace", help="Mounted at /work (default: a fresh temp dir).")
    ] = None,
    timeout: Annotated[str, typer.Option("--timeout", help="Wall time, e.g. 90s, 10m.")] = "10m",
    as_json: JsonOpt = False,
) -> None:
    """Run CMD under the ticket policy; its exit code passes through, its events are audited."""
    chosen = _backend(backend)
    ws = workspace or Path(tempfile.mkdtemp(prefix="segfactory-exec-"))
    spec = SandboxSpec(command=command, workspace=ws, timeout_s=parse_duration(timeout))
    log = _audit_log(home)

    def on_event(event: SandboxEvent) -> None:
        if log is not None:
            log.append("sandbox", event.kind, event.model_dump(mode="json"))

    try:
        if log is not None:
            log.append(
                "sandbox",
                "sandbox_exec_start",
                {"backend": backend, "command": command, "workspace": str(ws)},
            )
        result = chosen.run(spec, on_event)
        if log is not None:
            log.append("sandbox", "sandbox_exec_end", _summary(result))
    finally:
        if log is not None:
            log.close()
    _emit_result(result, ws, as_json)
    raise typer.Exit(result.exit_code)


class ExecSummary(TypedDict):
    """A ``sandbox exec``'s end: the audit record's payload, and the head of its ``--json`` reply."""

    backend: str
    exit_code: int
    timed_out: bool
    oom_killed: bool
    duration_s: float
    stdout_bytes: int
    stdout_truncated: bool
    stderr_bytes: int
    stderr_truncated: bool
    events: int  # how many sandbox events the run had


def _summary(result: SandboxResult) -> ExecSummary:
    return {
        "backend": result.backend,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "oom_killed": result.oom_killed,
        "duration_s": round(result.duration_s, 3),
        "stdout_bytes": result.stdout.size,
        "stdout_truncated": result.stdout.truncated,
        "stderr_bytes": result.stderr.size,
        "stderr_truncated": result.stderr.truncated,
        "events": len(result.events),
    }


def _emit_result(result: Any, workspace: Path, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                **_summary(result),
                "workspace": str(workspace),
                "stdout": result.stdout.data.decode(errors="replace"),
                "stderr": result.stderr.data.decode(errors="replace"),
                "events": [e.model_dump(mode="json") for e in result.events],
            }
        )
        return
    sys.stdout.buffer.write(result.stdout.data)
    sys.stdout.flush()
    sys.stderr.buffer.write(result.stderr.data)
    for stream, name in ((result.stdout, "stdout"), (result.stderr, "stderr")):
        if stream.truncated:
            sys.stderr.write(
                f"segfactory: {name} truncated: kept {len(stream.data)} of {stream.size} bytes\n"
            )
    if result.timed_out:
        sys.stderr.write(f"segfactory: the command timed out after {result.duration_s:.1f}s\n")
    for event in result.events:
        if event.kind in ("protected_read_attempt", "monitoring_gap", "workspace_limit"):
            sys.stderr.write(
                f"segfactory: sandbox event {event.kind} {inert(event.path or '', multiline=False)}\n"
            )
