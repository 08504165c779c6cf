"""Error typing on hand-built masks where every error kind is known."""

from __future__ import annotations

import numpy as np

from analysis.errortypes import ErrorType, analyse_errors, rank_problems, size_bin


def _scene() -> tuple[np.ndarray, np.ndarray, list[dict[str, object]]]:
    gt = np.zeros((1, 40, 40), dtype=np.uint8)
    pred = np.zeros((1, 40, 40), dtype=np.float32)
    gt[0, 2:6, 2:6] = 1  # A: missed (16 px)
    gt[0, 2:12, 20:30] = 1  # B: split in two (100 px)
    pred[0, 2:12, 20:24] = 1
    pred[0, 2:12, 26:30] = 1
    gt[0, 20:24, 2:6] = 1  # C and D: merged by one predicted bridge
    gt[0, 20:24, 10:14] = 1
    pred[0, 20:24, 2:14] = 1
    gt[0, 30:38, 20:28] = 1  # E: wrong boundary (64 px, prediction covers 12)
    pred[0, 33:36, 22:26] = 1
    gt[0, 30:34, 32:36] = 1  # F: hit
    pred[0, 30:34, 32:36] = 1
    pred[0, 36:39, 2:5] = 1  # false alarm (9 px)
    defects: list[dict[str, object]] = [
        {"image_id": "a", "bbox": [2, 2, 6, 6]},
        {"image_id": "a", "bbox": [2, 20, 12, 30]},
        {"image_id": "a", "bbox": [20, 2, 24, 6]},
        {"image_id": "a", "bbox": [30, 20, 38, 28]},
        {"image_id": "a", "bbox": [30, 32, 34, 36]},
        {"image_id": "a", "bbox": [0, 0, 1, 1]},
    ]
    return pred, gt, defects


def test_every_error_type_is_named_and_binned_by_size() -> None:
    pred, gt, defects = _scene()
    result = analyse_errors(pred, gt, defects=defects, image_ids=["a"])
    counts = result.counts()
    assert counts[ErrorType.MISSED.value] == {"tiny": 0, "small": 1, "medium": 0, "large": 0}
    assert counts[ErrorType.SPLIT.value]["medium"] == 1
    assert sum(counts[ErrorType.MERGED.value].values()) == 2
    assert (
        counts[ErrorType.WRONG_BOUNDARY.value]["large"] == 0
        and counts[ErrorType.WRONG_BOUNDARY.value]["medium"] == 1
    )
    assert counts[ErrorType.FALSE_ALARM.value]["tiny"] == 1
    assert result.defect_outcome == ["missed", "split", "merged", "wrong_boundary", "ok", "unlabelled"]
    assert 0 < result.per_image["dice"][0] < 1


def test_a_model_that_predicts_nothing_misses_everything_without_nan() -> None:
    _, gt, _ = _scene()
    gt = np.concatenate([gt, np.zeros_like(gt)])
    result = analyse_errors(np.zeros(gt.shape, np.float32), gt)
    assert all(c.outcome == "missed" for c in result.gt)
    assert result.false_alarm_area.size == 0
    assert result.per_image["dice"].tolist() == [0.0, 1.0]  # an empty image predicted empty is perfect
    assert rank_problems(result.counts())[0].error_type == "missed"


def test_ranked_problems_are_ordered_by_count_and_sum_to_one() -> None:
    pred, gt, _ = _scene()
    problems = rank_problems(analyse_errors(pred, gt).counts())
    assert [p.count for p in problems] == sorted((p.count for p in problems), reverse=True)
    assert abs(sum(p.share for p in problems) - 1.0) < 1e-9


def test_size_bins_are_closed_below() -> None:
    assert [size_bin(a) for a in (1, 15, 16, 63, 64, 256, 10_000)] == [
        "tiny",
        "tiny",
        "small",
        "small",
        "medium",
        "large",
        "large",
    ]
