"""A ticket whose sandboxes left audit findings is held for a person, and nothing of it goes on.

An attempt is evidence even when it failed: the vault read that met ENOENT, the connect that met
no network, the write that met a read-only root. So a ticket is held when ``audit check`` finds
anything in the records of its run that name it: its training attempts (``ticket_id``, written
by the runner) and, for a code ticket, the code-editing agent's own ``run`` commands for the
draft it came from (``ticket`` = the draft's key, matched by the files the agent wrote).

Held means: the ticket is not submitted to the gate (no query is spent on it), so it is never
judged, replicated or promoted; its outcome is recorded as failed with the findings as the
reason; it waits in the loop's ``held`` state with ``pending: "audit"``; a ``ticket_held`` record
(actor ``system``) lists the findings for people; the run goes on with the next ticket.

The loop calls :meth:`AuditHolds.hold` in its gate step, before anything is submitted, and
:func:`held_update` for the state change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agents.judge import Decision, JudgeDecision
from agents.state import FactoryState, Held, Update
from audit import Finding, ProtectedPaths, check_records, iter_records, load_policy, ticket_of
from segfactory.records import Actor, AuditRecord, Ticket
from segfactory.seams import AuditSink

CODE_AGENT_FILES = "code_agent_files"  # the code arm's record of what the agent wrote, per draft
REASON_SHOWN = 3  # findings named in the outcome's reason; all of them are in ticket_held


class AuditHold(BaseModel):
    """Why a ticket is held: its findings, and the code-agent drafts they came from too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    run_id: str
    drafts: list[str]  # code-agent draft keys whose sandbox findings count for this ticket
    findings: list[Finding]

    @property
    def reason(self) -> str:
        shown = "; ".join(f"{f.event} {f.path}" for f in self.findings[:REASON_SHOWN])
        more = len(self.findings) - REASON_SHOWN
        return (
            f"held for a person: {len(self.findings)} audit finding(s) in its sandboxes ({shown}"
            + (f"; {more} more" if more > 0 else "")
            + "); see `segfactory audit check`"
        )


class AuditHolds:
    """Reads the home's audit log to decide, per ticket, whether it is held."""

    def __init__(self, home: Path, policy: ProtectedPaths | None = None) -> None:
        self.home = Path(home)
        self.policy = policy or load_policy()

    def hold(self, run_id: str, ticket: Ticket) -> AuditHold | None:
        """The hold for ``ticket`` when its run's records name it in any finding, else None."""
        records = [r for r in iter_records(self.home / "audit" / "log.jsonl") if r.run_id == run_id]
        drafts = drafts_of(ticket, records)
        names = {ticket.id, *drafts}
        mine = [r for r in records if ticket_of(r) in names]
        findings = check_records(mine, self.policy, self.home)
        if not findings:
            return None
        return AuditHold(ticket_id=ticket.id, run_id=run_id, drafts=sorted(drafts), findings=findings)


def drafts_of(ticket: Ticket, records: Iterable[AuditRecord]) -> set[str]:
    """The code-agent drafts whose written files are exactly ``ticket``'s (by SHA-256)."""
    files = ticket.change.get("files")
    if not isinstance(files, dict) or not files:
        return set()
    digests = {str(n): hashlib.sha256(str(t).encode()).hexdigest() for n, t in files.items()}
    found = set()
    for record in records:
        if record.event != CODE_AGENT_FILES or record.actor is not Actor.CODE_AGENT:
            continue
        written = record.payload.get("files")
        if (
            isinstance(written, dict)
            and {str(n): (v.get("sha256") if isinstance(v, dict) else None) for n, v in written.items()}
            == digests
        ):
            found.add(str(record.payload.get("draft")))
    return found


def held_update(state: FactoryState, hold: AuditHold, sink: AuditSink) -> Update:
    """The loop's state change for a held ticket (``state.current``), and its record.

    Nothing is submitted; the outcome becomes ``failed`` without a model; a replicate's original
    is rejected (its replicate cannot confirm it).
    """
    ticket, outcome = state.current, state.outcome
    assert ticket is not None and outcome is not None, "a ticket is held after it ran"
    sink.append(
        Actor.SYSTEM.value,
        "ticket_held",
        {
            "ticket": hold.ticket_id,
            "pending": "audit",
            "drafts": hold.drafts,
            "findings": [f.model_dump(mode="json") for f in hold.findings],
        },
        run_id=hold.run_id,
    )
    entry = Held(ticket=ticket, confirm_a=None, pending="audit", findings=len(hold.findings))
    failed = outcome.model_copy(update={"status": "failed", "model_ref": None, "reason": hold.reason})
    update: Update = {"verdict": None, "outcome": failed, "held": {**state.held, hold.ticket_id: entry}}
    awaiting = dict(state.awaiting_replicate)
    if ticket.replicate_of and awaiting.pop(ticket.replicate_of, None) is not None:
        decision = JudgeDecision(
            ticket_id=ticket.replicate_of,
            decision=Decision.REJECT,
            by="rule",
            reason=f"its replicate {hold.ticket_id} is held for audit findings; nothing is promoted",
        )
        sink.append(
            Actor.JUDGE.value,
            "judge_decision",
            {"decision": decision.model_dump(mode="json")},
            run_id=hold.run_id,
        )
        update["awaiting_replicate"], update["decisions"] = awaiting, [decision]
    return update


__all__ = ["AuditHold", "AuditHolds", "drafts_of", "held_update"]
