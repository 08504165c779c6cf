"""One candidate through the agents' own pipeline: run → dev win → confirm-a → replicate → judge.

``run_candidate`` is the per-ticket path of ``agents.graph`` (run, gate, judge, record) without
the graph, so that the sweep and the A/A runs spend their evidence exactly as the agent arm
does: a dev loss spends no query; a dev win queries confirm-a; a confirm-a WIN trains a
replicate with a host-chosen seed, which queries confirm-b only if it is a dev win too; the
coded judge (``agents.judge``) decides, and a PROMOTE moves the global best.

``CandidateServices`` is what it needs: ``agents.services.HostServices`` plus ``dev_score``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypedDict

from pydantic import BaseModel, ConfigDict

from agents.judge import Decision, JudgeInput, TicketMeta
from segfactory.records import CoarseVerdict, Ticket, Verdict


class CandidateServices(Protocol):
    """``HostServices``' runner and gate side, plus the host-computed dev score of a ticket.

    ``run_ticket`` trains and returns a ``agents.graph.RunOutcome`` (flag only, no score);
    ``dev_score`` returns the host-computed dev object F1 of a ticket that trained, else None.
    """

    def run_ticket(self, ticket: Ticket) -> Any: ...

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict: ...

    def promote(self, ticket_id: str) -> None: ...

    def dev_score(self, ticket_id: str) -> float | None: ...


class JudgeLike(Protocol):
    def decide(self, judged: JudgeInput) -> Any: ...


class CandidateResult(BaseModel):
    """What happened to one candidate (people only: it holds the dev score)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ticket_id: str
    status: str  # dev_win | dev_loss | failed
    dev_score: float | None = None
    device_seconds: float = 0.0  # the candidate's and its replicate's
    confirm_a: Verdict | None = None
    replicate_id: str | None = None
    replicate_status: str | None = None
    confirm_b: Verdict | None = None
    decision: str | None = None  # the judge's: promote | reject | escalate (None: no query)
    reason: str = ""

    @property
    def promoted(self) -> bool:
        return self.decision == Decision.PROMOTE.value


class _Fields(TypedDict, total=False):
    """A :class:`CandidateResult`'s fields as the path sets them, step by step."""

    ticket_id: str
    status: str
    device_seconds: float
    dev_score: float | None
    reason: str
    confirm_a: Verdict
    decision: str
    replicate_id: str
    replicate_status: str
    confirm_b: Verdict


def run_candidate(
    services: CandidateServices, judge: JudgeLike, ticket: Ticket, make_seed: Callable[[], int]
) -> CandidateResult:
    """Run one ticket end to end; a failure is a recorded result, never an exception."""
    outcome = services.run_ticket(ticket)
    base: _Fields = {
        "ticket_id": ticket.id,
        "status": outcome.status,
        "device_seconds": outcome.device_seconds,
        "dev_score": services.dev_score(ticket.id) if outcome.status != "failed" else None,
        "reason": outcome.reason,
    }
    if outcome.status != "dev_win" or outcome.model_ref is None:
        return CandidateResult(**base)
    verdict = services.submit(ticket, outcome.model_ref, None)
    decision = judge.decide(JudgeInput(ticket=TicketMeta.of(ticket), confirm_a=verdict))
    base.update(
        {"confirm_a": verdict.verdict, "decision": decision.decision.value, "reason": decision.reason}
    )
    if decision.decision is not Decision.REPLICATE:
        return CandidateResult(**base)
    return _replicate(services, judge, ticket, verdict, make_seed, base)


def _replicate(
    services: CandidateServices,
    judge: JudgeLike,
    ticket: Ticket,
    confirm_a: CoarseVerdict,
    make_seed: Callable[[], int],
    base: _Fields,
) -> CandidateResult:
    replicate = ticket.model_copy(
        update={"id": f"{ticket.id}-rep", "replicate_of": ticket.id, "seed": make_seed()}
    )
    outcome = services.run_ticket(replicate)
    base.update(
        {
            "replicate_id": replicate.id,
            "replicate_status": outcome.status,
            "device_seconds": base["device_seconds"] + outcome.device_seconds,
        }
    )
    if outcome.status != "dev_win" or outcome.model_ref is None:  # no confirm-b query spent
        base.update(
            {
                "decision": Decision.REJECT.value,
                "reason": f"the replicate {replicate.id} did not win on dev; no confirm-b query spent",
            }
        )
        return CandidateResult(**base)
    verdict = services.submit(replicate, outcome.model_ref, ticket.id)
    decision = judge.decide(
        JudgeInput(
            ticket=TicketMeta.of(ticket), confirm_a=confirm_a, replicate_id=replicate.id, confirm_b=verdict
        )
    )
    if decision.decision is Decision.PROMOTE:
        services.promote(ticket.id)
    base.update(
        {"confirm_b": verdict.verdict, "decision": decision.decision.value, "reason": decision.reason}
    )
    return CandidateResult(**base)


__all__ = ["CandidateResult", "CandidateServices", "run_candidate"]
