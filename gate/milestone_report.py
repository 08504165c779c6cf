"""A milestone's report as a record: ``MilestoneReport`` of ``TierScores`` and ``ModelScore``s.

``gate.milestones.run_milestone`` builds it, ``POST /milestone`` dumps it (``as_json``, so keys
that apply only to a real tier are absent, not null) and ``GateClient.milestone`` parses the
reply into it. It lives apart from ``gate.replies`` because the training-range records it holds
load numpy and the generator's package, which a client that only asks for status need not.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_serializer, model_validator

from segfactory.records import Result
from segfactory.stats import Interval
from synthetic.intensity import IntensityStats
from vision.training_data import TrainingRange


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
    def _all_stats(self, stats: IntensityStats | None) -> dict[str, object] | None:
        return None if stats is None else stats.model_dump(mode="json")  # every field, set or default


class MilestoneReport(Result):
    """``POST /milestone``: every model scored once on every planned tier."""

    name: str
    run_id: str
    tiers: dict[str, TierScores]


__all__ = ["MilestoneReport", "ModelScore", "TierScores"]
