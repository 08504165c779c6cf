"""``gate`` and ``judge``: a dev win spends one query; the coded rule decides on the words alone.

Only a dev win is submitted (a dev loss, a failure or a control spends no query). The judge sees
the ticket's metadata and the coarse verdicts, never a score (trust rules 4 and 7): a confirm-a
WIN earns a replicate with a host-chosen seed, scored on confirm-b; WIN and replicate WIN
promote, through the gate, which checks its own ledger; anything else rejects, or escalates to a
person where an LLM reviewer asks for it.
"""

from __future__ import annotations

from agents.audit_hold import held_update
from agents.faults import fault_point
from agents.judge import Decision, JudgeDecision, JudgeInput, TicketMeta, rule_decision
from agents.state import Awaiting, FactoryState, Held, Update
from agents.steps._base import Step
from segfactory.errors import GateError
from segfactory.records import Actor, CoarseVerdict, Ticket


class JudgeStep(Step):
    def gate(self, state: FactoryState) -> Update:
        outcome, ticket = state.outcome, state.current
        assert outcome is not None and ticket is not None, "gate runs after run"
        if self.d.audit_hold is not None and (hold := self.d.audit_hold(state.run_id, ticket)):
            return held_update(state, hold, self.d.sink)  # no query, no judge, no promotion
        if outcome.status != "dev_win" or outcome.model_ref is None:
            return {"verdict": None}  # a dev loss, a failure or a control spends no query
        verdict = self.d.services.submit(ticket, outcome.model_ref, ticket.replicate_of)
        fault_point("after_verdict")  # tests: a kill -9 after the gate answered, before the checkpoint
        return {"verdict": verdict}

    def judge(self, state: FactoryState) -> Update:
        ticket = state.current
        assert ticket is not None, "judge runs after run"
        if state.verdict is None:
            return self._replicate_lost_on_dev(state, ticket)
        awaiting = dict(state.awaiting_replicate)
        judged = self._input(ticket, state.verdict, awaiting)
        decision = self.d.judge.decide(judged)
        update: Update = {"awaiting_replicate": awaiting}
        if decision.decision is Decision.PROMOTE:  # promotion is code: only after both WINs
            decision = self._promote(state, decision)
            if decision.decision is Decision.PROMOTE:
                update["reanalyse"] = True
        update["decisions"] = [decision]
        if decision.decision is Decision.REPLICATE:  # a new training seed, chosen by the host
            awaiting[ticket.id] = Awaiting(ticket=ticket, confirm_a=state.verdict)
            update["queue"] = [self.replicate(ticket), *state.queue]
        if decision.decision is Decision.ESCALATE:
            update.update(self._escalate(state, judged, decision))
        return update

    def _input(self, ticket: Ticket, verdict: CoarseVerdict, awaiting: dict[str, Awaiting]) -> JudgeInput:
        """The judge's whole input; a replicate is judged as its original with both verdicts."""
        if ticket.replicate_of is None:
            return JudgeInput(ticket=TicketMeta.of(ticket), confirm_a=verdict)
        original = awaiting.pop(ticket.replicate_of)
        return JudgeInput(
            ticket=TicketMeta.of(original.ticket),
            confirm_a=original.confirm_a,
            replicate_id=ticket.id,
            confirm_b=verdict,
        )

    def _promote(self, state: FactoryState, decision: JudgeDecision) -> JudgeDecision:
        try:
            self.d.services.promote(decision.ticket_id)
        except GateError as exc:  # e.g. its confirm-a WIN was against a best another ticket replaced
            return self.rule_decision(
                state, decision.ticket_id, Decision.REJECT, f"promotion refused by the gate: {exc}"
            )
        return decision

    def _escalate(self, state: FactoryState, judged: JudgeInput, decision: JudgeDecision) -> Update:
        """Hold the ticket for a person when the coded rule would have promoted or replicated."""
        coded = rule_decision(judged).decision
        if self.d.approvals is None or coded not in (Decision.PROMOTE, Decision.REPLICATE):
            return {}  # e.g. a spent tier: a person rotates it; nothing is held
        original = judged.ticket.id
        item = state.awaiting_replicate.get(original)
        if item is None:
            assert state.current is not None
            item = Awaiting(ticket=state.current, confirm_a=judged.confirm_a)
        item_id = self.d.approvals.escalate(item.ticket, decision, state.run_id, pending=coded.value)
        self.d.sink.append(
            Actor.JUDGE.value,
            "ticket_held",
            {"ticket": original, "escalation": item_id, "pending": coded.value},
            run_id=state.run_id,
        )
        held = Held(ticket=item.ticket, confirm_a=item.confirm_a, pending=coded.value)
        return {"held": {**state.held, original: held}}

    def _replicate_lost_on_dev(self, state: FactoryState, ticket: Ticket) -> Update:
        """A replicate that is no dev win spends no confirm-b query: its original is rejected."""
        awaiting = dict(state.awaiting_replicate)
        if ticket.replicate_of is None or ticket.replicate_of not in awaiting:
            return {}
        awaiting.pop(ticket.replicate_of)
        reason = f"the replicate {ticket.id} did not win on dev; no confirm-b query spent"
        decision = self.rule_decision(state, ticket.replicate_of, Decision.REJECT, reason)
        return {"decisions": [decision], "awaiting_replicate": awaiting}


__all__ = ["JudgeStep"]
