"""CLI: ``segfactory challenge TICKET [--seeds K] [--run R]``. See docs/cli.md for the contract."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agents.challenge import ChallengeSetup, challenge_ticket
from audit import AuditLog
from cli._common import BackendOpt, HomeOpt, JsonOpt, console, emit_json
from segfactory.errors import HomeError
from segfactory.home import Home
from segfactory.text import inert


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("challenge")(challenge_cmd)


def challenge_cmd(
    ticket: Annotated[str, typer.Argument(help="The ticket whose claimed result is re-derived.")],
    seeds: Annotated[
        int | None, typer.Option("--seeds", help="New host-chosen seeds (default: the policy's).")
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="The run holding the ticket (default: search all).")
    ] = None,
    backend: BackendOpt = "bwrap",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-derive a claimed win or finding with new seeds; uphold or retract it (people/challenges/)."""
    resolved = Home.resolve(home)
    if not resolved.exists():
        raise HomeError(
            f"no segfactory home at {resolved.root}; a challenge needs the run's records "
            "(run `segfactory init` and a run first)"
        )
    with AuditLog(resolved, None) as log:  # anchored by the next writer that holds the gate's anchor
        record = challenge_ticket(
            ChallengeSetup(resolved, log, backend=backend), ticket, seeds=seeds, run_id=run
        )
    summary = _summary(record)
    if json_out:
        emit_json(summary)
        return
    out = console()
    out.print(f"challenge {summary['challenge_id']} of {ticket}: [bold]{summary['verdict'].upper()}[/bold]")
    for reason in summary["reasons"]:
        out.print(f"  - {inert(reason, multiline=False)}", markup=False)
    if summary["demoted"]:
        out.print(f"  the current best moved back to {summary['demoted_to'][:12]}")


def _summary(record: Any) -> dict[str, Any]:
    data: dict[str, Any] = record.model_dump(mode="json")
    return {
        "challenge_id": data["challenge_id"],
        "ticket_id": data["claim"]["ticket_id"],
        "run_id": data["claim"]["run_id"],
        "claim": data["claim"],
        "verdict": data["verdict"],
        "reasons": data["reasons"],
        "seeds": data["seeds"],
        "diff": data["diff"],
        "range_checks": data["range_checks"],
        "conditions": data["conditions"],
        "demoted": data["demoted"],
        "demoted_to": data["demoted_to"],
        "device_seconds": data["device_seconds"],
    }
