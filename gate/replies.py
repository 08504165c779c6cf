"""What the gate answers about itself, as records: ``GateStatus`` with its tiers, quarantines and
answer time.

The service builds them (``gate.core.Gate.status``) and the client parses its reply into them, so
a reply that does not fit is refused at the client instead of travelling on as a dict. An agent's
credential sees a quarantine without its ``ts`` and ``reason`` (the reason can quote held-back
rows) and the answer time without the calibration behind it (``AnswerTime.for_agent``); a record
is dumped with ``exclude_unset``, so those keys are absent, not null.
"""

from __future__ import annotations

import math
from typing import Literal

from segfactory.records import Result

# A submission whose scoring costs more than this many times the reference pair's is given this
# many times the answer time, no more: its verdict may overrun (INVALID), the bytes' own doing.
MAX_COST_SCALE = 16.0

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
    """The answer time of a served gate, fixed at its start (``gate.calibrate``).

    ``seconds`` is the answer time of a submission that costs what the reference pair cost to
    score (the reference candidate and the reference best, ``reference_cost``). A submission's own
    answer time is ``for_costs``: ``seconds`` times the ratio of its scoring cost (the candidate's
    plus the current best's, as if the best were scored afresh, whatever the cache holds) to the
    reference pair's, never below 1 nor above ``MAX_COST_SCALE``, rounded up to whole seconds.
    Costs are counted from the models' bytes alone (``gate._intake_rules.scoring_cost``), so an
    answer's time says nothing a caller could not count itself: not the verdict, not the cache.

    ``seconds``, ``source`` and ``reference_cost`` are what any caller may know. The rest is for
    people: the verdict time the gate measured on its reference pair and what the answer time was
    derived from.
    """

    seconds: float  # the answer time of a submission costing what the reference pair did
    source: AnswerSource  # calibrated (multiple of the measured time), or an override: flag | env
    # multiply-accumulates of scoring the reference pair on one image (None: not counted, no scaling)
    reference_cost: int | None = None
    requested: str | None = None  # people only: the override as given (``600``, ``2x``)
    measured_verdict_s: float | None = None  # people only: the reference verdict's wall time
    multiple: float | None = None  # people only: ANSWER_TIME_MULTIPLE, or the override's ``Nx``
    floor_s: float | None = None  # people only: ANSWER_TIME_FLOOR_S (calibrated only)
    tier: str | None = None  # people only: the tier version the reference verdict was scored on
    tier_version: int | None = None
    reference_sha256: str | None = None  # people only: the reference candidate
    started_at: float | None = None  # people only: when the gate fixed it (epoch seconds)

    def for_agent(self) -> AnswerTime:
        if self.reference_cost is None:
            return AnswerTime(seconds=self.seconds, source=self.source)
        return AnswerTime(seconds=self.seconds, source=self.source, reference_cost=self.reference_cost)

    def for_costs(self, candidate: int | None, best: int | None) -> float:
        """The answer time of a submission whose candidate and current best cost this much to score.
        A model whose cost could not be counted counts as the whole reference pair (whose candidate
        is a base-config model, and whose best, the classical baseline, costs next to nothing).
        Calibrated, the scale applies to the measured verdict's multiple and the floor after it;
        an override's seconds are scaled as they are."""
        if not self.reference_cost:
            return self.seconds
        unknown = self.reference_cost
        cost = (unknown if candidate is None else candidate) + (unknown if best is None else best)
        scale = min(MAX_COST_SCALE, max(1.0, cost / self.reference_cost))
        if scale == 1.0:
            return self.seconds
        if self.source == "calibrated" and self.measured_verdict_s and self.multiple:
            scaled = max(self.floor_s or 0.0, self.multiple * self.measured_verdict_s * scale)
            return max(self.seconds, float(math.ceil(scaled)))
        return float(math.ceil(self.seconds * scale))


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
