"""What every step shares: its dependencies, the audit sink, and a judge decision on record."""

from __future__ import annotations

from agents.judge import Decision, JudgeDecision
from agents.loop_deps import LoopDeps
from agents.state import FactoryState
from segfactory.records import Actor, Ticket


class Step:
    def __init__(self, deps: LoopDeps) -> None:
        self.d = deps

    def audit(self, state: FactoryState, event: str, payload: dict[str, object]) -> None:
        self.d.sink.append(Actor.SYSTEM.value, event, payload, run_id=state.run_id)

    def rule_decision(
        self, state: FactoryState, ticket_id: str, decision: Decision, reason: str
    ) -> JudgeDecision:
        """A decision the coded rule takes outside the judge (a refused promotion, a replicate lost
        on dev, a person's answer), recorded as the judge's."""
        record = JudgeDecision(ticket_id=ticket_id, decision=decision, by="rule", reason=reason)
        self.d.sink.append(
            Actor.JUDGE.value,
            "judge_decision",
            {"decision": record.model_dump(mode="json")},
            run_id=state.run_id,
        )
        return record

    def replicate(self, ticket: Ticket) -> Ticket:
        """The same recipe under a new training seed chosen by the host."""
        return ticket.model_copy(
            update={"id": f"{ticket.id}-rep", "replicate_of": ticket.id, "seed": self.d.make_seed()}
        )


__all__ = ["Step"]
