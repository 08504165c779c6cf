"""Error typing: every mistake a segmentation makes, named by kind and size.

Connected components of the ground truth and of the thresholded prediction are matched by
overlap. Each ground-truth component gets one outcome, in this order of precedence:

- ``missed``          no predicted component touches it;
- ``merged``          a predicted component that touches it also touches another void;
- ``split``           two or more predicted components touch it;
- ``wrong_boundary``  matched one to one, but with IoU below ``BOUNDARY_IOU``;
- ``ok``              matched one to one with IoU at or above ``BOUNDARY_IOU``.

Each predicted component touching no void is a ``false_alarm``. Sizes are component areas in
pixels, binned by ``SIZE_BINS_PX``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from scipy import ndimage

BOUNDARY_IOU = 0.5  # a 1:1 match below this IoU is a wrong-boundary error
SIZE_BINS_PX = (0, 16, 64, 256)  # lower edges (pixels) of the size bins; the last bin is open
SIZE_BIN_NAMES = ("tiny", "small", "medium", "large")
EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)


class ErrorType(StrEnum):
    MISSED = "missed"
    FALSE_ALARM = "false_alarm"
    MERGED = "merged"
    SPLIT = "split"
    WRONG_BOUNDARY = "wrong_boundary"


OK = "ok"


def size_bin(area: float) -> str:
    """The name of the size bin an area (pixels) falls in."""
    index = int(np.searchsorted(SIZE_BINS_PX, area, side="right")) - 1
    return SIZE_BIN_NAMES[max(index, 0)]


@dataclass
class Component:
    """One ground-truth void or one false-alarm region."""

    image: int
    label: int
    area: int
    outcome: str  # an ErrorType value or "ok"
    iou: float = 0.0


@dataclass
class ErrorAnalysis:
    """Per-component outcomes plus per-image summaries of one model on one split."""

    gt: list[Component]
    false_alarm_area: np.ndarray  # (F,) pixels of each false-alarm region (there may be very many)
    n_images: int
    per_image: dict[str, np.ndarray] = field(default_factory=dict)  # type -> (N,) counts; "dice" -> (N,)
    defect_outcome: list[str] = field(default_factory=list)  # aligned with the split's defect rows

    def counts(self) -> dict[str, dict[str, int]]:
        """Error counts per type and size bin (zero-filled, so tables never have holes)."""
        table = {t.value: dict.fromkeys(SIZE_BIN_NAMES, 0) for t in ErrorType}
        for comp in self.gt:
            if comp.outcome != OK:
                table[comp.outcome][size_bin(comp.area)] += 1
        bins = np.searchsorted(SIZE_BINS_PX, self.false_alarm_area, side="right") - 1
        per_bin = np.bincount(np.clip(bins, 0, None), minlength=len(SIZE_BIN_NAMES))
        table[ErrorType.FALSE_ALARM.value] = {
            name: int(c) for name, c in zip(SIZE_BIN_NAMES, per_bin, strict=True)
        }
        return table


def _overlap(gt_lab: np.ndarray, n_gt: int, pr_lab: np.ndarray, n_pr: int) -> np.ndarray:
    """(n_gt+1, n_pr+1) pixel counts of every (gt label, pred label) pair; row/col 0 = background."""
    flat = gt_lab.ravel().astype(np.int64) * (n_pr + 1) + pr_lab.ravel()
    return np.bincount(flat, minlength=(n_gt + 1) * (n_pr + 1)).reshape(n_gt + 1, n_pr + 1)


def _gt_outcome(g: int, touch: np.ndarray, areas_gt: np.ndarray, areas_pr: np.ndarray) -> tuple[str, float]:
    preds = np.flatnonzero(touch[g, 1:] > 0) + 1
    if preds.size == 0:
        return ErrorType.MISSED.value, 0.0
    if any(np.count_nonzero(touch[1:, p] > 0) > 1 for p in preds):
        return ErrorType.MERGED.value, 0.0
    if preds.size > 1:
        return ErrorType.SPLIT.value, 0.0
    p = int(preds[0])
    inter = float(touch[g, p])
    iou = inter / (areas_gt[g] + areas_pr[p] - inter)
    return (OK if iou >= BOUNDARY_IOU else ErrorType.WRONG_BOUNDARY.value), iou


def type_image(
    index: int, pred: np.ndarray, gt: np.ndarray
) -> tuple[list[Component], np.ndarray, np.ndarray]:
    """Type the errors of one image; returns (gt components, false-alarm areas, gt label image)."""
    gt_lab, n_gt = ndimage.label(gt, structure=EIGHT_CONNECTED)
    pr_lab, n_pr = ndimage.label(pred, structure=EIGHT_CONNECTED)
    touch = _overlap(gt_lab, n_gt, pr_lab, n_pr)
    areas_gt, areas_pr = touch.sum(axis=1), touch.sum(axis=0)
    comps = []
    for g in range(1, n_gt + 1):
        outcome, iou = _gt_outcome(g, touch, areas_gt, areas_pr)
        comps.append(Component(index, g, int(areas_gt[g]), outcome, iou))
    alarms = areas_pr[1:][touch[1:, 1:].sum(axis=0) == 0]
    return comps, alarms, gt_lab


def _dice(pred: np.ndarray, gt: np.ndarray) -> float:
    total = int(pred.sum()) + int(gt.sum())
    return 1.0 if total == 0 else 2.0 * float(np.logical_and(pred, gt).sum()) / total


def _defect_label(gt_lab: np.ndarray, bbox: Sequence[int]) -> int:
    """The gt component a defect row belongs to: the most common non-zero label in its bbox."""
    y0, x0, y1, x1 = (int(v) for v in bbox)
    window = gt_lab[max(y0, 0) : y1, max(x0, 0) : x1]
    counts = np.bincount(window.ravel())
    return int(np.argmax(counts[1:]) + 1) if counts.size > 1 and counts[1:].any() else 0


def analyse_errors(
    prob: np.ndarray,
    gt: np.ndarray,
    *,
    threshold: float = 0.5,
    defects: Sequence[dict[str, Any]] = (),
    image_ids: Sequence[str] = (),
) -> ErrorAnalysis:
    """Type every error of ``prob`` (N, H, W) against ``gt`` (N, H, W).

    ``defects`` (rows of ``defects.jsonl``) with ``image_ids`` (the split's image ids, in order)
    give each defect row the outcome of the void it belongs to; a row whose bbox holds no void
    pixel gets ``"unlabelled"``.
    """
    if prob.shape != gt.shape:
        raise ValueError(f"prediction {prob.shape} and masks {gt.shape} differ in shape")
    n = prob.shape[0]
    by_image: dict[int, list[int]] = {}
    index_of = {str(i): k for k, i in enumerate(image_ids)}
    for row_no, row in enumerate(defects):
        k = index_of.get(str(row.get("image_id")))
        if k is not None:
            by_image.setdefault(k, []).append(row_no)
    defect_outcome = ["unlabelled"] * len(defects)
    all_gt: list[Component] = []
    all_fa: list[np.ndarray] = []
    per_image = {t.value: np.zeros(n) for t in ErrorType}
    per_image["dice"] = np.zeros(n)
    for k in range(n):
        pred, mask = prob[k] >= threshold, gt[k] > 0
        comps, alarms, gt_lab = type_image(k, pred, mask)
        all_gt.extend(comps)
        all_fa.append(alarms)
        for comp in comps:
            if comp.outcome != OK:
                per_image[comp.outcome][k] += 1
        per_image[ErrorType.FALSE_ALARM.value][k] = len(alarms)
        per_image["dice"][k] = _dice(pred, mask)
        outcome_of = {c.label: c.outcome for c in comps}
        for row_no in by_image.get(k, []):
            label = _defect_label(gt_lab, defects[row_no].get("bbox", (0, 0, 0, 0)))
            defect_outcome[row_no] = outcome_of.get(label, "unlabelled")
    fa_area = np.concatenate(all_fa) if all_fa else np.zeros(0, dtype=np.int64)
    return ErrorAnalysis(all_gt, fa_area, n, per_image, defect_outcome)


@dataclass(frozen=True)
class Problem:
    """One line of the ranked list of what goes wrong."""

    error_type: str
    size_bin: str
    count: int
    share: float  # of all errors

    def describe(self) -> str:
        return (
            f"{self.count} {self.error_type.replace('_', ' ')} ({self.size_bin} voids), "
            f"{self.share:.0%} of errors"
        )


def rank_problems(counts: dict[str, dict[str, int]], top: int = 10) -> list[Problem]:
    """Error (type, size bin) cells of ``ErrorAnalysis.counts()`` by count, largest first; empty cells
    left out."""
    cells = [(t, b, c) for t, row in counts.items() for b, c in row.items() if c > 0]
    total = sum(c for _, _, c in cells)
    cells.sort(key=lambda cell: (-cell[2], cell[0], cell[1]))
    return [Problem(t, b, c, c / total) for t, b, c in cells[:top]]
