"""CLI: ``segfactory challenge TICKET [--seeds K] [--run R]``. See docs/cli.md for the contract."""

from __future__ import annotations

from typing import Annotated, TypedDict

import typer

from agents.challenge import ChallengeRecord, ChallengeSetup, challenge_ticket
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
        out.print(f"  the current best moved back to {str(summary['demoted_to'])[:12]}")


class ChallengeSummary(TypedDict):
    """What ``challenge --json`` prints: the record's verdict with its claim, seeds and conditions."""

    challenge_id: str
    ticket_id: str
    run_id: str
    claim: dict[str, object]  # the Claim's JSON form
    verdict: str
    reasons: list[str]
    seeds: list[int]
    diff: dict[str, list[object]]  # field -> the distinct values across conditions
    range_checks: list[dict[str, object]]  # RangeCheck JSON forms
    conditions: list[dict[str, object]]  # Condition JSON forms
    demoted: bool
    demoted_to: str | None
    device_seconds: float


def _summary(record: ChallengeRecord) -> ChallengeSummary:
    data = record.model_dump(mode="json")
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
