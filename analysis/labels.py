"""Label-error estimate: ``cleanlab.segmentation`` on a model's predictions.

An image counts as *flagged* when cleanlab marks at least ``MIN_FLAGGED_PX`` of its pixels as
likely mislabelled. The estimate is the flagged share with a Wilson interval. Run on dev it
says how noisy the dev labels look; run on a sample of train beside dev it says whether the
training labels look worse than dev's, which points at label fixes or curation.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from segfactory.stats import wilson_interval

MIN_FLAGGED_PX = 4  # pixels cleanlab must flag in an image for the image to count as flagged
MAX_LABEL_IMAGES = 256  # images per estimate; past this a seeded sample of this size is used


class LabelEstimate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    split: str
    n_images: int
    flagged: int
    rate: float
    low: float
    high: float
    sampled: bool  # true when the split had more than MAX_LABEL_IMAGES images
    flagged_ids: list[str]


def flagged_images(prob: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """(N,) bool: images in which cleanlab flags at least MIN_FLAGGED_PX pixels."""
    from cleanlab.segmentation.filter import find_label_issues

    if not masks.any() or masks.all():
        return np.zeros(masks.shape[0], dtype=bool)  # cleanlab needs both classes present
    p = np.clip(prob.astype(np.float32), 1e-6, 1 - 1e-6)
    pred_probs = np.stack([1.0 - p, p], axis=1)  # (N, 2, H, W)
    issues = find_label_issues(masks.astype(np.int64), pred_probs, n_jobs=1, verbose=False)
    return np.asarray(issues.reshape(issues.shape[0], -1).sum(axis=1) >= MIN_FLAGGED_PX)


def estimate(split: str, prob: np.ndarray, masks: np.ndarray, ids: list[str], seed: int = 0) -> LabelEstimate:
    """The flagged share of ``split`` (sampled down to MAX_LABEL_IMAGES images)."""
    n = prob.shape[0]
    take = np.arange(n)
    if n > MAX_LABEL_IMAGES:
        take = np.sort(np.random.default_rng(seed).choice(n, MAX_LABEL_IMAGES, replace=False))
    flags = flagged_images(prob[take], masks[take]) if take.size else np.zeros(0, dtype=bool)
    iv = wilson_interval(int(flags.sum()), int(take.size))
    return LabelEstimate(
        split=split,
        n_images=int(take.size),
        flagged=int(flags.sum()),
        rate=iv.estimate,
        low=iv.low,
        high=iv.high,
        sampled=n > MAX_LABEL_IMAGES,
        flagged_ids=[ids[int(i)] for i in take[flags]][:50],
    )
