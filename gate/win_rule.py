"""The pre-registered win rule (trust rule 8): ``policies/win_rule.yaml``, validated and hashed.

``load_win_rule(path)`` returns the validated rule and the sha256 of the file's bytes. The gate
pins that hash at init; ``check_pinned`` raises ``PolicyError`` when the file changed since, and
the service then refuses every query until a person re-pins it (a new run).

``decide(best, candidate, rule)`` is the whole comparison: per-image metrics of both models on
the same images, a seeded paired bootstrap of (candidate - best) in the primary metric, WIN when
its lower bound exceeds the margin and the worst supported size slice loses at most
``max_slice_drop`` of object recall.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from segfactory.errors import PolicyError

DEFAULT_WIN_RULE = Path(__file__).resolve().parent.parent / "policies" / "win_rule.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Comparison(_Strict):
    n_boot: int = Field(ge=100, le=100_000)
    alpha: float = Field(gt=0, lt=0.5)
    margin: float = Field(ge=0)
    seed: int = Field(ge=0)


class Robust(_Strict):
    slices: Literal["size_bins"]
    min_support: int = Field(ge=1)
    max_slice_drop: float = Field(ge=0, le=1)


class DevRule(_Strict):
    statistic: Literal["object_f1"]
    dev_margin: float = Field(ge=0)


class WinRule(_Strict):
    version: Literal[1]
    primary_metric: Literal["object_f1"]
    threshold: float = Field(gt=0, lt=1)
    iou_match: float = Field(gt=0, le=1)
    comparison: Comparison
    robust: Robust
    budgets: dict[Literal["confirm-a", "confirm-b"], int]
    milestone_quota: dict[Literal["sealed", "never-queried", "real-holdout"], int]
    dev_rule: DevRule


def load_win_rule(path: Path = DEFAULT_WIN_RULE) -> tuple[WinRule, str]:
    """The validated rule and the sha256 of the file's bytes."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read win rule {path}: {exc.strerror}") from None
    try:
        rule = WinRule.model_validate(yaml.safe_load(data))
    except Exception as exc:  # yaml or pydantic validation
        raise PolicyError(f"win rule {path} is invalid: {str(exc).splitlines()[0]}") from None
    return rule, hashlib.sha256(data).hexdigest()


def check_pinned(path: Path, pinned_sha256: str) -> WinRule:
    """The rule, if its file still hashes to the pinned value; else PolicyError (queries stop)."""
    rule, digest = load_win_rule(path)
    if digest != pinned_sha256:
        raise PolicyError(
            f"win rule {path} changed since it was pinned: expected sha256 {pinned_sha256[:12]}…, "
            f"got {digest[:12]}…; queries are stopped until a person re-pins it for a new run"
        )
    return rule


@dataclass(frozen=True)
class Decision:
    """What the gate decided and why (the numbers are for people only)."""

    win: bool
    estimate: float
    low: float
    high: float
    worst_slice_drop: float
    reason: str


def _slice_recall(size_hits: np.ndarray, size_count: np.ndarray, min_support: int) -> dict[int, float]:
    hits, counts = size_hits.sum(axis=0), size_count.sum(axis=0)
    return {i: float(hits[i] / counts[i]) for i in range(len(counts)) if counts[i] >= min_support}


def decide(best_prob: np.ndarray, cand_prob: np.ndarray, masks: np.ndarray, rule: WinRule) -> Decision:
    """Apply the rule to two models' probabilities (N, H, W) on the same labelled images."""
    from analysis.stats import paired_bootstrap_diff
    from vision.metrics import object_f1, per_image_metrics

    best = per_image_metrics(best_prob, masks, threshold=rule.threshold, iou_match=rule.iou_match)
    cand = per_image_metrics(cand_prob, masks, threshold=rule.threshold, iou_match=rule.iou_match)
    cmp = rule.comparison
    interval = paired_bootstrap_diff(
        (best.object_tp, best.object_fp, best.object_fn), (cand.object_tp, cand.object_fp, cand.object_fn),
        object_f1, n_boot=cmp.n_boot, seed=cmp.seed, alpha=cmp.alpha,
    )
    best_slices = _slice_recall(best.size_hits, best.size_count, rule.robust.min_support)
    cand_slices = _slice_recall(cand.size_hits, cand.size_count, rule.robust.min_support)
    drop = max((best_slices[i] - cand_slices[i] for i in best_slices), default=0.0)
    primary_ok = interval.low > cmp.margin
    robust_ok = drop <= rule.robust.max_slice_drop
    reason = (
        f"object_f1 diff {interval.estimate:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}] vs margin "
        f"{cmp.margin}; worst size-slice recall drop {drop:+.4f} vs {rule.robust.max_slice_drop}"
    )
    return Decision(primary_ok and robust_ok, interval.estimate, interval.low, interval.high, drop, reason)
