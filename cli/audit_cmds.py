"""CLI commands for audit: ``audit verify | check | show``. See docs/cli.md for the contract."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from audit import FileAnchorStore, check_records, iter_records, load_policy, select, verify_log
from audit.anchor import gate_anchor_store
from audit.show import parse_time
from cli._common import HomeOpt, JsonOpt, console, emit_json, home_for
from segfactory.errors import UsageError
from segfactory.home import Home
from segfactory.text import inert

if TYPE_CHECKING:
    from audit import AnchorStore, Finding, VerifyReport
    from segfactory.records import AuditRecord

audit_app = typer.Typer(help="Verify, check and show the tamper-evident audit log.", no_args_is_help=True)

AnchorOpt = Annotated[
    str,
    typer.Option(
        "--anchor",
        help="Where the chain head is anchored: 'gate' (the gate's ledger), 'file:PATH' (tests only) "
        "or 'none' (skip the anchor checks).",
    ),
]
PAYLOAD_PREVIEW_CHARS = 80  # table cells longer than this are cut with an ellipsis


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(audit_app, name="audit")


@audit_app.command("verify")
def verify(
    home: HomeOpt = None,
    json_out: JsonOpt = False,
    anchor: AnchorOpt = "gate",
    strict: Annotated[
        bool, typer.Option("--strict", help="Also fail on an unanchored window (end of a run).")
    ] = False,
) -> None:
    """Check the hash chain, the blobs and the anchor; exit 1 on any problem."""
    resolved = home_for(home)
    with _anchor_store(resolved, anchor) as store:
        found = store.get() if store is not None else None
        history = store.history() if store is not None else []
    report = verify_log(
        resolved.audit, found, anchor_checked=store is not None, strict=strict, history=history
    )
    if json_out:
        emit_json(report.to_json())
    else:
        _print_verify(report)
    if not report.ok:
        raise typer.Exit(code=1)


@audit_app.command("check")
def check(
    home: HomeOpt = None,
    json_out: JsonOpt = False,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="Protected-path policy (default: policies/protected_paths.yaml)."),
    ] = None,
) -> None:
    """List findings: protected-path reads (tool arguments, decoy hits) and every attempt the
    sandbox's audit hook saw (opens, writes, sockets, ctypes, processes); exit 1 on any."""
    resolved = home_for(home)
    findings = check_records(iter_records(resolved.audit / "log.jsonl"), load_policy(policy), resolved.root)
    if json_out:
        emit_json({"ok": not findings, "findings": [f.model_dump(mode="json") for f in findings]})
    else:
        _print_findings(findings)
    if findings:
        raise typer.Exit(code=1)


@audit_app.command("show")
def show(
    home: HomeOpt = None,
    json_out: JsonOpt = False,
    run: Annotated[str | None, typer.Option("--run", help="Only this run id.")] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor (proposer, gate, sandbox, ...).")
    ] = None,
    event: Annotated[str | None, typer.Option("--event", help="Only this event name.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="From this time: ISO 8601 or a duration ago (10m).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Before this time: ISO 8601 or a duration ago.")
    ] = None,
) -> None:
    """Show audit records, filtered, as a table or JSON."""
    resolved = home_for(home)
    start = parse_time(since) if since else None
    end = parse_time(until) if until else None
    records = list(
        select(
            iter_records(resolved.audit / "log.jsonl"),
            run=run,
            actor=actor,
            event=event,
            since=start,
            until=end,
        )
    )
    if json_out:
        emit_json({"count": len(records), "records": [r.model_dump(mode="json") for r in records]})
    else:
        _print_records(records)


@contextmanager
def _anchor_store(home: Home, spec: str) -> Iterator[AnchorStore | None]:
    """The anchor store named by ``--anchor``, open for the duration."""
    if spec == "none":
        yield None
    elif spec.startswith("file:") and len(spec) > len("file:"):
        yield FileAnchorStore(Path(spec[len("file:") :]))
    elif spec == "gate":
        with gate_anchor_store(home) as store:
            yield store
    else:
        raise UsageError(f"--anchor {spec!r} is not known; use gate, file:PATH or none")


def _print_verify(report: VerifyReport) -> None:
    out = console()
    status = "[green]intact[/green]" if report.ok else "[red]FAILED[/red]"
    out.print(f"audit log {status}: {report.records} records, head seq {report.head_seq}")
    anchor = report.anchor
    out.print(f"anchor: seq {anchor.seq}, hash {anchor.hash[:16]}…" if anchor else "anchor: none")
    if report.unanchored_from is not None:
        out.print(f"[yellow]unanchored window: seq {report.unanchored_from}..{report.head_seq}[/yellow]")
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}", markup=True, highlight=False)
    for problem in report.problems:
        out.print(f"[red]problem:[/red] {problem}", highlight=False)


def _print_findings(findings: list[Finding]) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    if not findings:
        out.print("[green]no findings[/green]")
        return
    table = Table("seq", "run", "ticket", "actor", "event", "kind", "path", "pattern", title="findings")
    for f in findings:
        path = escape(inert(f.path, multiline=False))  # a path a sandbox chose: no escapes, no markup
        ticket = escape(inert(f.ticket_id or "", multiline=False))
        table.add_row(str(f.seq), f.run_id or "", ticket, f.actor, f.event, f.kind, path, f.pattern or "")
    out.print(table)


def _print_records(records: list[AuditRecord]) -> None:
    import json
    from datetime import UTC, datetime

    from rich.table import Table

    table = Table("seq", "time (UTC)", "run", "actor", "event", "payload")
    for r in records:
        when = datetime.fromtimestamp(r.ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
        text = json.dumps(r.payload, sort_keys=True)
        if len(text) > PAYLOAD_PREVIEW_CHARS:
            text = text[: PAYLOAD_PREVIEW_CHARS - 1] + "…"
        table.add_row(str(r.seq), when, r.run_id or "", r.actor.value, r.event, text)
    console().print(table)
