"""The pre-registered win rule (trust rule 8): ``policies/win_rule.yaml``, validated and hashed.

``load_win_rule(path)`` returns the validated rule and the sha256 of the file's bytes. The gate
pins that hash at init; ``check_pinned`` raises ``PolicyError`` when the file changed since, and
the service then refuses every query until a person re-pins it (a new run).

``decide(best, candidate, rule)`` is the whole comparison: per-image metrics of both models on
the same images, a seeded paired bootstrap of (candidate - best) in the primary metric, WIN when
its lower bound exceeds the margin and the candidate is robust: its worst supported size slice
loses at most ``max_slice_drop`` of object recall, and under the worst of the pre-registered
in-range perturbations (``perturbed_views``) its object F1 falls at most ``max_perturbation_drop``
below the best's on the same perturbed images.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from segfactory.errors import PolicyError
from segfactory.stats import paired_bootstrap_diff
from vision.metrics import aggregate, object_f1, per_image_metrics
from vision.perturb import PERTURBATIONS, perturb

DEFAULT_WIN_RULE = Path(__file__).resolve().parent.parent / "policies" / "win_rule.yaml"
MAX_PERTURBATIONS = 8  # robustness views a rule may list; each costs one more pass over the tier


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Comparison(_Strict):
    n_boot: int = Field(ge=100, le=100_000)
    alpha: float = Field(gt=0, lt=0.5)
    margin: float = Field(ge=0)
    seed: int = Field(ge=0)


class PerturbationSpec(_Strict):
    name: str  # a key of vision.perturb.PERTURBATIONS
    severity: int = Field(ge=1, le=5)


class Robust(_Strict):
    slices: Literal["size_bins"]
    min_support: int = Field(ge=1)
    max_slice_drop: float = Field(ge=0, le=1)
    perturbations: tuple[PerturbationSpec, ...] = Field(max_length=MAX_PERTURBATIONS)
    max_perturbation_drop: float = Field(ge=0, le=1)
    perturbation_seed: int = Field(ge=0)

    @field_validator("perturbations")
    @classmethod
    def _known(cls, specs: tuple[PerturbationSpec, ...]) -> tuple[PerturbationSpec, ...]:
        unknown = sorted({s.name for s in specs} - set(PERTURBATIONS))
        if unknown:
            raise ValueError(f"unknown perturbations {unknown}; known: {', '.join(PERTURBATIONS)}")
        return specs


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


View = tuple[np.ndarray, np.ndarray, np.ndarray]  # (best prob, candidate prob, masks) on one perturbation


@dataclass(frozen=True)
class Decision:
    """What the gate decided and why (the numbers are for people only)."""

    win: bool
    estimate: float
    low: float
    high: float
    worst_slice_drop: float
    worst_perturbation_drop: float
    reason: str


def slice_recall(size_hits: np.ndarray, size_count: np.ndarray, min_support: int) -> dict[int, float]:
    """Recall per size bin (index into ``vision.metrics.SIZE_BINS``) over bins with ``min_support`` voids."""
    hits, counts = size_hits.sum(axis=0), size_count.sum(axis=0)
    return {i: float(hits[i] / counts[i]) for i in range(len(counts)) if counts[i] >= min_support}


def perturbed_views(
    images: np.ndarray, masks: np.ndarray, rule: WinRule
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The rule's perturbations of a tier, in rule order: deterministic (seeded) (images, masks) pairs."""
    robust = rule.robust
    return [
        perturb(p.name, p.severity, images, masks, robust.perturbation_seed) for p in robust.perturbations
    ]


def _object_f1(prob: np.ndarray, masks: np.ndarray, rule: WinRule) -> float:
    return float(
        aggregate(per_image_metrics(prob, masks, threshold=rule.threshold, iou_match=rule.iou_match))[
            "object_f1"
        ]
    )


def _perturbation_drop(views: Sequence[View], rule: WinRule) -> float:
    """The largest (best - candidate) object F1 over the perturbed views; 0 without any."""
    return max(
        (_object_f1(best, m, rule) - _object_f1(cand, m, rule) for best, cand, m in views), default=0.0
    )


def decide(
    best_prob: np.ndarray, cand_prob: np.ndarray, masks: np.ndarray, rule: WinRule, views: Sequence[View] = ()
) -> Decision:
    """Apply the rule to two models' probabilities (N, H, W) on the same labelled images.

    ``views`` holds (best prob, candidate prob, masks) on each of ``perturbed_views``, in order.
    """
    if len(views) != len(rule.robust.perturbations):
        raise ValueError(
            f"decide got {len(views)} perturbed views; the rule lists {len(rule.robust.perturbations)}"
        )
    best = per_image_metrics(best_prob, masks, threshold=rule.threshold, iou_match=rule.iou_match)
    cand = per_image_metrics(cand_prob, masks, threshold=rule.threshold, iou_match=rule.iou_match)
    cmp = rule.comparison
    interval = paired_bootstrap_diff(
        (best.object_tp, best.object_fp, best.object_fn),
        (cand.object_tp, cand.object_fp, cand.object_fn),
        object_f1,
        n_boot=cmp.n_boot,
        seed=cmp.seed,
        alpha=cmp.alpha,
    )
    best_slices = slice_recall(best.size_hits, best.size_count, rule.robust.min_support)
    cand_slices = slice_recall(cand.size_hits, cand.size_count, rule.robust.min_support)
    drop = max((best_slices[i] - cand_slices[i] for i in best_slices), default=0.0)
    perturbed = _perturbation_drop(views, rule)
    robust = rule.robust
    primary_ok = interval.low > cmp.margin
    robust_ok = drop <= robust.max_slice_drop and perturbed <= robust.max_perturbation_drop
    reason = (
        f"object_f1 diff {interval.estimate:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}] vs margin "
        f"{cmp.margin}; worst size-slice recall drop {drop:+.4f} vs {robust.max_slice_drop}; worst "
        f"perturbation object_f1 drop {perturbed:+.4f} vs {robust.max_perturbation_drop}"
    )
    return Decision(
        primary_ok and robust_ok, interval.estimate, interval.low, interval.high, drop, perturbed, reason
    )
