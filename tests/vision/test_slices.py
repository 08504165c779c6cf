"""Worst slice with a minimum support."""

from __future__ import annotations

import numpy as np

from vision.metrics import per_image_metrics
from vision.slices import worst_slice


def scene(n_small: int, n_large: int) -> tuple[np.ndarray, np.ndarray, list[dict], list[dict]]:
    """One void per image; the small ones (1 px) are missed, the large ones (5x5) found."""
    n = n_small + n_large
    gt = np.zeros((n, 16, 16), np.uint8)
    prob = np.zeros((n, 16, 16), np.float32)
    defects, meta = [], []
    for i in range(n):
        small = i < n_small
        if small:
            gt[i, 7, 7] = 1
            bbox = [7, 7, 8, 8]
        else:
            gt[i, 5:10, 5:10] = 1
            prob[i, 5:10, 5:10] = 1.0
            bbox = [5, 5, 10, 10]
        meta.append({"id": f"i{i}", "sha256": "x", "background": "flat" if small else "texture"})
        defects.append(
            {
                "image_id": f"i{i}",
                "area": 1 if small else 25,
                "shape": "pore" if small else "cavity",
                "bbox": bbox,
                "edge": False,
            }
        )
    return prob, gt, meta, defects


def test_worst_slice_is_the_missed_small_voids() -> None:
    prob, gt, meta, defects = scene(25, 25)
    result = worst_slice(per_image_metrics(prob, gt), meta, defects, min_support=20)
    worst = result.worst
    assert worst.score == 0.0 and worst.support == 25
    assert (worst.attribute, worst.value) in {("shape", "pore"), ("background", "flat"), ("area", "1")}
    by_key = {(r.attribute, r.value): r for r in result.slices}
    assert by_key[("shape", "cavity")].score == 1.0


def test_slice_below_min_support_cannot_be_worst() -> None:
    prob, gt, meta, defects = scene(5, 40)
    result = worst_slice(per_image_metrics(prob, gt), meta, defects, min_support=20)
    small = [r for r in result.slices if r.attribute == "shape" and r.value == "pore"][0]
    assert small.score == 0.0 and not small.eligible
    assert result.worst.score > 0.0


def test_no_eligible_slice_gives_none() -> None:
    prob, gt, meta, defects = scene(3, 3)
    assert worst_slice(per_image_metrics(prob, gt), meta, defects, min_support=20).worst is None


def test_void_free_image_slice_is_reported_but_not_worst() -> None:
    prob, gt, meta, defects = scene(0, 30)
    clean = np.zeros((25, 16, 16), np.uint8)
    fp = np.zeros((25, 16, 16), np.float32)
    fp[:, 1, 1] = 1.0  # one false positive in every void-free image
    for i in range(25):
        meta.append({"id": f"e{i}", "sha256": "x", "background": "empty"})
    per = per_image_metrics(np.concatenate([prob, fp]), np.concatenate([gt, clean]))
    result = worst_slice(per, meta, defects, min_support=20)
    empty = [r for r in result.slices if r.value == "empty"][0]
    assert empty.score == 0.0 and empty.n_objects == 0 and not empty.eligible
    assert result.worst is None or result.worst.value != "empty"
