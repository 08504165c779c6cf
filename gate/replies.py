"""What the gate answers, as records: ``GateStatus`` with its tiers and quarantines, and a
milestone's ``MilestoneReport``.

The service builds them (``gate.core.Gate.status``) and the client parses its reply into them, so
a reply that does not fit is refused at the client instead of travelling on as a dict. An agent's
credential sees a quarantine without its ``ts`` and ``reason`` (the reason can quote held-back
rows); a record is dumped with ``exclude_unset``, so those keys are absent, not null.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_serializer, model_validator

from segfactory.records import Result
from segfactory.stats import Interval
from synthetic.intensity import IntensityStats
from vision.training_data import TrainingRange


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


class GateStatus(Result):
    """``GET /status``: what people and the orchestrator may know about the gate."""

    win_rule_sha256: str | None  # the pinned rule's hash (None before init pinned one)
    win_rule_ok: bool  # the pinned rule still loads and matches its hash
    pinned_code_sha256: str | None
    pinned_code_ok: bool | None  # None when the gate runs without a pinned copy (tests)
    tiers: list[TierState]
    quarantine: list[Quarantine]
    current_best: str | None  # the current best model's sha256

    def for_agent(self) -> GateStatus:
        """The view of an agent's credential: quarantines without their reason or time."""
        hidden = [Quarantine(run_id=q.run_id, ticket_id=q.ticket_id) for q in self.quarantine]
        return self.model_copy(update={"quarantine": hidden})


class ModelScore(Result):
    """One model on one milestone tier. Fields a gate pinned before they existed may leave out."""

    provider: str | None = None  # the execution provider that scored it
    object_f1: Interval  # with its bootstrap interval over the tier's images
    pixel_iou: float
    dice: float
    object_recall: float
    n_images: int
    n_detections: int | None = None
    n_voids: int | None = None
    # the win rule's "robust": recall per size bin holding at least min_support voids, and its worst
    slice_recall: dict[str, float] | None = None
    worst_slice_recall: float | None = None
    slice_voids: dict[str, int] | None = None  # the voids each of those bins holds
    training_range: TrainingRange | None = None  # real tiers only


class TierScores(Result):
    """One tier of a milestone: its version and each model's scores (keyed by sha256), or the
    scoring error that stopped it. A real tier adds its intensity statistics (aggregates only)."""

    version: int
    models: dict[str, ModelScore]
    error: str | None = None
    intensity: IntensityStats | None = None

    @model_validator(mode="before")
    @classmethod
    def _error_in_models(cls, data: Any) -> Any:
        """A gate pinned before this record put a scoring error under ``models``."""
        if isinstance(data, dict) and isinstance(data.get("models", {}).get("error"), str):
            return {**data, "models": {}, "error": data["models"]["error"]}
        return data

    @field_serializer("intensity")
    def _all_stats(self, stats: IntensityStats | None) -> dict[str, Any] | None:
        return None if stats is None else stats.model_dump(mode="json")  # every field, set or default


class MilestoneReport(Result):
    """``POST /milestone``: every model scored once on every planned tier."""

    name: str
    run_id: str
    tiers: dict[str, TierScores]


__all__ = ["GateStatus", "MilestoneReport", "ModelScore", "Quarantine", "TierScores", "TierState"]
