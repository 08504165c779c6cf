"""``record``, ``milestone`` and ``report``: the verdict on record, the stop rules, the run's end.

``record`` appends the ticket's coarse verdict (or why it was not submitted) to the history the
proposer sees, counts tickets without a dev win for the plateau rule, and stops the run when a
budget would be passed: wall time (with the next batch at the average pace), device time (with
a share of an average ticket), the ticket cap, LLM tokens, or the plateau. A replicate owed to a
confirm-a WIN runs even past the device budget.
"""

from __future__ import annotations

from typing import Literal

from agents.context import VerdictEntry
from agents.loop_deps import LoopDeps
from agents.state import FactoryState, Update
from agents.steps._base import Step

_NOT_SUBMITTED: dict[str, Literal["DEV_LOSS", "FAILED", "CONTROL"]] = {
    "dev_loss": "DEV_LOSS",
    "failed": "FAILED",
    "control": "CONTROL",
}


def stop_reason(d: LoopDeps, state: FactoryState) -> str:
    """Why the run stops now, or "" while every budget holds another ticket."""
    caps = d.caps
    elapsed, done = d.clock() - state.started_at, max(1, state.tickets_run)
    batch = max(1, d.concurrency)  # tickets the next run step trains together
    if elapsed >= caps.wall_seconds:
        return f"budget: wall time {caps.wall_seconds:g} s spent"
    if elapsed + batch * elapsed / done > caps.wall_seconds:  # the next ticket(s), at the average pace
        return f"budget: wall time {caps.wall_seconds:g} s would be passed by the next ticket"
    spent, share = state.device_seconds, d.device_left_share
    # A confirm-a WIN's replicate runs even past the device budget: its query is spent, and
    # without the replicate the win can be neither promoted nor rejected (a sweep's trial
    # likewise includes its replicate). Nothing else does (owed_only).
    owed = any(q.replicate_of for q in state.queue)
    if spent >= caps.device_seconds and not owed:
        return f"budget: device time {caps.device_seconds:g} s spent"
    if caps.device_seconds - spent < share * batch * spent / done and not owed:  # the next would overshoot
        return (
            f"budget: device time {caps.device_seconds:g} s: {caps.device_seconds - spent:.0f} s left, "
            f"under {share:g} of a ticket at the average {spent / done:.0f} s"
        )
    if state.tickets_run >= caps.tickets:
        return f"budget: {caps.tickets} tickets run"
    if d.usage.tokens >= caps.llm_tokens > 0:
        return f"budget: {caps.llm_tokens} LLM tokens spent"
    if 0 < d.plateau_tickets <= state.since_dev_win:
        return (
            f"plateau: {d.plateau_tickets} tickets in a row without a dev win "
            "(policies/run.yaml plateau.tickets_without_dev_win)"
        )
    return ""


def owed_only(d: LoopDeps, state: FactoryState) -> bool:
    """True when the run goes on only because replicates owed to confirm-a WINs are queued: the
    stop rules would end it without them. Then those replicates train, and no other ticket."""
    if not any(q.replicate_of for q in state.queue):
        return False
    return bool(stop_reason(d, state.model_copy(update={"queue": []})))


class RecordStep(Step):
    def record(self, state: FactoryState) -> Update:
        ticket, outcome = state.current, state.outcome
        assert ticket is not None and outcome is not None, "record runs after run"
        if state.verdict is not None:
            entry = VerdictEntry.from_verdict(ticket, state.verdict)
        else:
            entry = VerdictEntry.not_submitted(ticket, _NOT_SUBMITTED.get(outcome.status, "FAILED"))
        self.audit(
            state, "ticket_recorded", {"ticket": ticket.id, "verdict": entry.verdict, "tier": entry.tier}
        )
        since = state.since_dev_win
        if ticket.replicate_of is None and outcome.status != "control":
            since = 0 if outcome.status == "dev_win" else since + 1
        update: Update = {
            "history": [entry],
            "current": None,
            "outcome": None,
            "verdict": None,
            "since_dev_win": since,
        }
        if (
            not state.trained
        ):  # trained tickets waiting to be judged are judged first: their device time is spent
            spent = self.spent(state.model_copy(update={"since_dev_win": since}))
            if spent:
                update["stop_reason"] = spent
        return update

    def spent(self, state: FactoryState) -> str:
        """Why the run stops now, or "" while every budget holds another ticket."""
        return stop_reason(self.d, state)

    def milestone(self, state: FactoryState) -> Update:
        self.d.services.milestone(state.run_id)
        return {}

    def report(self, state: FactoryState) -> Update:
        self.d.services.report(state.run_id, state.stop_reason)
        self.audit(state, "run_end", {"stop_reason": state.stop_reason, "tickets_run": state.tickets_run})
        return {}


__all__ = ["RecordStep"]
