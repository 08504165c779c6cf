"""What the gate answers about itself, as records: ``GateStatus`` with its tiers, quarantines and
answer time.

The service builds them (``gate.core.Gate.status``) and the client parses its reply into them, so
a reply that does not fit is refused at the client instead of travelling on as a dict. An agent's
credential sees a quarantine without its ``ts`` and ``reason`` (the reason can quote held-back
rows) and the answer time without the calibration behind it (``AnswerTime.for_agent``); a record
is dumped with ``exclude_unset``, so those keys are absent, not null.
"""

from __future__ import annotations

from typing import Literal

from segfactory.records import Result

AnswerSource = Literal["calibrated", "flag", "env"]


class TierState(Result):
    """One version of a held-back tier and its query budget."""

    tier: str
    version: int
    budget: int
    spent: int
    left: int


class Quarantine(Result):
    """A run the gate stopped answering (a leak was found in what it submitted)."""

    run_id: str | None
    ticket_id: str
    ts: float | None = None  # people only
    reason: str | None = None  # people only: it can quote held-back rows


class AnswerTime(Result):
    """The one answer time of a served gate, fixed at its start (``gate.calibrate``).

    ``seconds`` and ``source`` are what any caller may know: every answer takes exactly that long,
    so an agent learns it from one submission anyway. The rest is for people: the verdict time the
    gate measured on its reference model and what the answer time was derived from.
    """

    seconds: float  # every /submit answer leaves this long after its request arrived
    source: AnswerSource  # calibrated (multiple of the measured time), or an override: flag | env
    requested: str | None = None  # people only: the override as given (``600``, ``2x``)
    measured_verdict_s: float | None = None  # people only: the reference verdict's wall time
    multiple: float | None = None  # people only: ANSWER_TIME_MULTIPLE, or the override's ``Nx``
    floor_s: float | None = None  # people only: ANSWER_TIME_FLOOR_S (calibrated only)
    tier: str | None = None  # people only: the tier version the reference verdict was scored on
    tier_version: int | None = None
    reference_sha256: str | None = None  # people only: the reference candidate
    started_at: float | None = None  # people only: when the gate fixed it (epoch seconds)

    def for_agent(self) -> AnswerTime:
        return AnswerTime(seconds=self.seconds, source=self.source)


class GateStatus(Result):
    """``GET /status``: what people and the orchestrator may know about the gate."""

    win_rule_sha256: str | None  # the pinned rule's hash (None before init pinned one)
    win_rule_ok: bool  # the pinned rule still loads and matches its hash
    pinned_code_sha256: str | None
    pinned_code_ok: bool | None  # None when the gate runs without a pinned copy (tests)
    tiers: list[TierState]
    quarantine: list[Quarantine]
    current_best: str | None  # the current best model's sha256
    answer_time: AnswerTime | None = None  # None only for an app embedded in a test process

    def for_agent(self) -> GateStatus:
        """The view of an agent's credential: quarantines without their reason or time, the answer
        time without its calibration (the measured figure is a verdict time on a held-back tier)."""
        hidden = [Quarantine(run_id=q.run_id, ticket_id=q.ticket_id) for q in self.quarantine]
        update: dict[str, object] = {"quarantine": hidden}
        if self.answer_time is not None:
            update["answer_time"] = self.answer_time.for_agent()
        return self.model_copy(update=update)


__all__ = ["AnswerSource", "AnswerTime", "GateStatus", "Quarantine", "TierState"]
