"""Choosing the threshold and the minimum component size, on images carved from train (never dev).

Every (threshold, minimum size) pair of the grid is applied to the ensemble's probabilities on
the carved images, exactly as the packaged graph will (``p >= t``, then ``filter_small``), and
scored with the gate's own object F1 (``vision.metrics``). The pair kept has the highest object
F1 among those whose worst void-size recall (bins with at least ``DEFAULT_MIN_SUPPORT`` voids)
stays within ``max_slice_drop`` of the untouched ensemble's (threshold g, no size filter): the
win rule also asks a candidate not to lose the smallest voids. Ties go to the pair closest to
the untouched one (threshold nearest g, then the smaller size), so that nothing changes without
a measured gain.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from vision.metrics import DEFAULT_MIN_SUPPORT, aggregate, per_image_metrics
from vision.packaging._components import filter_small


class Scored(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float
    min_size: int
    object_f1: float
    worst_size_recall: float | None  # None: no size bin had enough voids


class Choice(BaseModel):
    """What was chosen, against what, on how many carved images."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chosen: Scored
    untouched: Scored  # threshold g, no size filter: what the ensemble scores as it is
    images: int
    grid: list[Scored]


def score(prob: np.ndarray, masks: np.ndarray, threshold: float, min_size: int) -> Scored:
    """The gate's object F1 and worst size-bin recall of one post-processing on (N, H, W) ``prob``."""
    decided = filter_small(prob >= np.float32(threshold), min_size).astype(np.float32)
    per_image = per_image_metrics(decided, masks, threshold=0.5)
    hits, counts = per_image.size_hits.sum(axis=0), per_image.size_count.sum(axis=0)
    recalls = [float(h / c) for h, c in zip(hits, counts, strict=True) if c >= DEFAULT_MIN_SUPPORT]
    return Scored(
        threshold=threshold,
        min_size=min_size,
        object_f1=aggregate(per_image)["object_f1"],
        worst_size_recall=min(recalls) if recalls else None,
    )


def _allowed(candidate: Scored, untouched: Scored, max_slice_drop: float) -> bool:
    if untouched.worst_size_recall is None or candidate.worst_size_recall is None:
        return True
    return candidate.worst_size_recall >= untouched.worst_size_recall - max_slice_drop


def choose(
    prob: np.ndarray,
    masks: np.ndarray,
    thresholds: list[float],
    min_sizes: list[int],
    gate_threshold: float,
    max_slice_drop: float,
) -> Choice:
    """The best pair of the grid on the carved images (see the module docstring)."""
    untouched = score(prob, masks, gate_threshold, 1)
    grid = [score(prob, masks, t, m) for t in thresholds for m in min_sizes]
    allowed = [s for s in grid if _allowed(s, untouched, max_slice_drop)] + [untouched]
    best = max(
        allowed,
        key=lambda s: (round(s.object_f1, 9), -abs(s.threshold - gate_threshold), -s.min_size),
    )
    return Choice(chosen=best, untouched=untouched, images=int(prob.shape[0]), grid=grid)


__all__ = ["Choice", "Scored", "choose", "score"]
