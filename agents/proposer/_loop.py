"""Drafts → validated tickets, asking the proposer again a bounded number of times.

The host assigns each draft its id, arm and seed, validates it (``agents.validate``), records
every refused draft with its reasons (``ticket_invalid``) and every accepted one
(``ticket_proposed``), and shows the refusals to the proposer on its next try.
"""

from __future__ import annotations

from collections.abc import Callable

from agents.context import ProposerContext
from agents.llm import LLMFailed
from agents.proposer._base import Proposer, Rejected, TicketDraft
from segfactory.records import Actor, Arm, Ticket, TicketKind
from segfactory.seams import AuditSink

MAX_PROPOSAL_ROUNDS = 3  # first ask + 2 re-asks; past it the loop goes on with what it has


def to_ticket(draft: TicketDraft, ticket_id: str, seed: int) -> Ticket:
    arm = Arm.AGENT_CODE if draft.kind is TicketKind.CODE else Arm.AGENT
    return Ticket(id=ticket_id, arm=arm, seed=seed, **draft.model_dump())


def propose_valid(
    proposer: Proposer,
    context: ProposerContext,
    n: int,
    *,
    check: Callable[[Ticket], list[str]],
    make_id: Callable[[], str],
    make_seed: Callable[[], int],
    sink: AuditSink,
    run_id: str | None = None,
    max_rounds: int = MAX_PROPOSAL_ROUNDS,
) -> list[Ticket]:
    """Up to ``n`` valid tickets; fewer when the proposer runs dry or the rounds run out.

    An LLM that fails on a re-ask (``LLMFailed``, its bounded retries spent) after valid tickets
    were accepted costs only the re-ask: those tickets are returned (audit ``proposer_failed``
    with ``kept``); with none accepted the failure is raised, and the run stops cleanly.
    """
    accepted: list[Ticket] = []
    rejected: list[Rejected] = []
    seen: set[str] = set()  # drafts already handled in this call: a repeat is dropped, not re-run
    for round_no in range(1, max_rounds + 1):
        try:
            proposed = proposer.propose(context, n - len(accepted), rejected)
        except LLMFailed as exc:
            if not accepted:
                raise
            sink.append(
                Actor.PROPOSER.value,
                "proposer_failed",
                {
                    "proposer": proposer.name,
                    "round": round_no,
                    "error": str(exc),
                    "kept": [t.id for t in accepted],
                },
                run_id=run_id,
            )
            break
        drafts = [d for d in proposed if d.model_dump_json() not in seen]
        if not drafts:
            break
        seen.update(d.model_dump_json() for d in drafts)
        new_rejections = 0
        for draft in drafts:
            ticket = to_ticket(draft, make_id(), make_seed())
            reasons = check(ticket)
            event = "ticket_invalid" if reasons else "ticket_proposed"
            sink.append(
                Actor.PROPOSER.value,
                event,
                {
                    "proposer": proposer.name,
                    "round": round_no,
                    "ticket": ticket.model_dump(mode="json"),
                    "reasons": reasons,
                },
                run_id=run_id,
            )
            if reasons:
                rejected.append(Rejected(draft=draft, reasons=reasons))
                new_rejections += 1
            else:
                accepted.append(ticket)
        if len(accepted) >= n or new_rejections == 0:
            break
    return accepted[:n]
