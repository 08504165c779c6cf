"""Metrics against hand-computed cases, including empty ground truth and empty predictions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segfactory.errors import DataError
from vision.metrics import aggregate, boundary_band, per_image_metrics


def blank(n: int = 1, size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((n, size, size), np.float32), np.zeros((n, size, size), np.uint8)


def test_perfect_square() -> None:
    prob, gt = blank()
    gt[0, 4:8, 4:8] = 1
    prob[0, 4:8, 4:8] = 0.9
    m = per_image_metrics(prob, gt)
    assert (m.pixel_tp[0], m.pixel_fp[0], m.pixel_fn[0]) == (16, 0, 0)
    assert m.pixel_iou[0] == 1.0 and m.dice[0] == 1.0 and m.boundary_iou[0] == 1.0
    assert (m.object_tp[0], m.object_fp[0], m.object_fn[0]) == (1, 0, 0)


def test_partial_overlap_hand_computed() -> None:
    prob, gt = blank()
    gt[0, 2:4, 2:4] = 1  # 4 px
    prob[0, 2:4, 2:5] = 1.0  # 6 px, 4 shared
    m = per_image_metrics(prob, gt)
    assert m.pixel_iou[0] == pytest.approx(4 / 6)
    assert m.dice[0] == pytest.approx(8 / 10)
    assert m.object_tp[0] == 1


def test_empty_gt_and_empty_prediction_is_perfect() -> None:
    prob, gt = blank(2)
    m = per_image_metrics(prob, gt)
    assert (
        list(m.pixel_iou) == [1.0, 1.0] and list(m.dice) == [1.0, 1.0] and list(m.boundary_iou) == [1.0, 1.0]
    )
    agg = aggregate(m)
    assert agg["n_gt_objects"] == 0 and agg["n_pred_objects"] == 0
    assert agg["object_f1"] == 1.0 and agg["object_recall"] == 1.0 and agg["object_precision"] == 1.0
    assert "recall_size_tiny_lt4" not in agg and agg["n_size_tiny_lt4"] == 0


def test_empty_gt_with_false_positive() -> None:
    prob, gt = blank()
    prob[0, 1:3, 1:3] = 1.0
    m = per_image_metrics(prob, gt)
    assert m.pixel_fp[0] == 4 and m.pixel_iou[0] == 0.0 and m.dice[0] == 0.0
    agg = aggregate(m)
    assert (agg["object_fp"], agg["object_f1"], agg["object_precision"]) == (1, 0.0, 0.0)
    assert agg["object_recall"] == 1.0  # vacuous: no GT objects, reported with n_gt_objects = 0


def test_missed_object_with_empty_prediction() -> None:
    prob, gt = blank()
    gt[0, 5, 5] = 1
    agg = aggregate(per_image_metrics(prob, gt))
    assert (agg["object_fn"], agg["object_recall"], agg["object_f1"], agg["pixel_iou"]) == (1, 0.0, 0.0, 0.0)
    assert agg["object_precision"] == 1.0  # vacuous: nothing predicted
    assert agg["recall_size_tiny_lt4"] == 0.0


def test_threshold_is_inclusive() -> None:
    prob, gt = blank()
    gt[0, 3, 3] = 1
    prob[0, 3, 3] = 0.5
    assert per_image_metrics(prob, gt).object_tp[0] == 1
    assert per_image_metrics(prob, gt, threshold=0.6).object_tp[0] == 0


def test_matching_rule_tiny_void() -> None:
    prob, gt = blank()
    gt[0, 5, 5] = 1
    prob[0, 4:7, 4:7] = 1.0  # 3x3 blob: IoU 1/9 >= 0.1 -> found
    assert per_image_metrics(prob, gt).object_tp[0] == 1
    assert per_image_metrics(prob, gt, iou_match=0.5).object_fn[0] == 1  # the usual 0.5 calls it missed
    prob[0] = 0
    prob[0, 4:8, 4:8] = 1.0  # 4x4 blob: IoU 1/16 < 0.1 -> one FN and one FP
    m = per_image_metrics(prob, gt)
    assert (m.object_tp[0], m.object_fn[0], m.object_fp[0]) == (0, 1, 1)


def test_one_prediction_cannot_claim_two_voids() -> None:
    prob, gt = blank()
    gt[0, 2:4, 2:4] = 1
    gt[0, 2:4, 6:8] = 1
    prob[0, 2:4, 2:8] = 1.0  # one blob over both (IoU 4/12 each)
    m = per_image_metrics(prob, gt)
    assert (m.object_tp[0], m.object_fn[0], m.object_fp[0]) == (1, 1, 0)


def test_components_are_8_connected() -> None:
    prob, gt = blank()
    gt[0, 2, 2] = gt[0, 3, 3] = 1  # diagonal neighbours: one void
    assert aggregate(per_image_metrics(prob, gt))["n_gt_objects"] == 1


def test_pixel_recall_high_while_object_recall_low() -> None:
    """One large void found, many tiny voids missed: why object metrics matter."""
    prob, gt = blank(1, 64)
    gt[0, 10:30, 10:30] = 1  # 400 px
    tiny = [(40 + 3 * k % 20, 5 + 3 * k) for k in range(12)]
    for y, x in tiny:
        gt[0, y, x] = 1  # twelve 1-px voids
    prob[0, 10:30, 10:30] = 0.95
    agg = aggregate(per_image_metrics(prob, gt))
    assert agg["pixel_recall"] == pytest.approx(400 / 412) and agg["pixel_recall"] > 0.95
    assert agg["object_recall"] == pytest.approx(1 / 13) and agg["object_recall"] < 0.1
    assert agg["recall_size_tiny_lt4"] == 0.0 and agg["recall_size_large_ge64"] == 1.0


def test_recall_by_size_bin() -> None:
    prob, gt = blank(1, 32)
    gt[0, 1, 1] = 1  # 1 px (tiny)
    gt[0, 5:7, 5:8] = 1  # 6 px (small)
    gt[0, 10:15, 10:15] = 1  # 25 px (medium)
    prob[0, 5:7, 5:8] = 1.0
    prob[0, 10:15, 10:15] = 1.0
    agg = aggregate(per_image_metrics(prob, gt))
    assert (agg["recall_size_tiny_lt4"], agg["recall_size_small_4_15"], agg["recall_size_medium_16_63"]) == (
        0,
        1,
        1,
    )
    assert "recall_size_large_ge64" not in agg


def test_boundary_band_known_shapes() -> None:
    mask = np.zeros((1, 64, 64), np.uint8)  # diagonal 90.5 -> d = round(1.81) = 2
    mask[0, 20:30, 20:30] = 1
    band = boundary_band(mask)
    assert band.sum() == 100 - 36  # a 10x10 square keeps its 6x6 core
    assert not band[0, 22:28, 22:28].any()
    edge = np.zeros((1, 64, 64), np.uint8)
    edge[0, 0:10, 0:10] = 1  # touching the image border: the border counts as contour
    assert boundary_band(edge).sum() == 100 - 36
    dot = np.zeros((1, 16, 16), np.uint8)  # diagonal 22.6 -> d = max(1, round(0.45)) = 1
    dot[0, 8, 8] = 1
    assert boundary_band(dot).sum() == 1


def test_boundary_iou_shifted_square() -> None:
    prob, gt = blank(1, 64)
    gt[0, 20:30, 20:30] = 1
    prob[0, 20:30, 21:31] = 1.0  # shifted one pixel right; both bands 64 px
    inter = int((boundary_band(gt) & boundary_band(prob >= 0.5)).sum())
    m = per_image_metrics(prob, gt)
    assert m.boundary_iou[0] == pytest.approx(inter / (128 - inter))
    assert m.boundary_iou[0] < m.pixel_iou[0]  # boundary IoU is the stricter score


@pytest.mark.parametrize(
    ("prob", "gt", "message"),
    [
        (np.zeros((2, 8), np.float32), np.zeros((2, 8), np.uint8), "float"),
        (np.zeros((2, 8, 8), np.int64), np.zeros((2, 8, 8), np.uint8), "float"),
        (np.zeros((2, 8, 8), np.float32), np.zeros((2, 8, 8), np.float32), "uint8"),
        (np.zeros((2, 8, 8), np.float32), np.zeros((3, 8, 8), np.uint8), "counts must match"),
        (np.zeros((2, 8, 8), np.float32), np.zeros((2, 8, 9), np.uint8), "differs"),
        (np.zeros((0, 8, 8), np.float32), np.zeros((0, 8, 8), np.uint8), "empty"),
        (np.full((1, 8, 8), np.nan, np.float32), np.zeros((1, 8, 8), np.uint8), "NaN or inf"),
        (np.full((1, 8, 8), np.inf, np.float32), np.zeros((1, 8, 8), np.uint8), "NaN or inf"),
        (np.full((1, 8, 8), 2.0, np.float32), np.zeros((1, 8, 8), np.uint8), r"\[0, 1\]"),
        (np.zeros((1, 8, 8), np.float32), np.full((1, 8, 8), 255, np.uint8), "0 and 1"),
    ],
)
def test_bad_input_raises_data_error(prob: np.ndarray, gt: np.ndarray, message: str) -> None:
    with pytest.raises(DataError, match=message):
        per_image_metrics(prob, gt)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 4), p_gt=st.floats(0, 0.3), p_pred=st.floats(0, 0.3))
def test_aggregate_is_finite_and_bounded(seed: int, n: int, p_gt: float, p_pred: float) -> None:
    rng = np.random.default_rng(seed)
    gt = (rng.random((n, 12, 12)) < p_gt).astype(np.uint8)
    prob = (rng.random((n, 12, 12)) < p_pred).astype(np.float32)
    agg = aggregate(per_image_metrics(prob, gt))
    for key, value in agg.items():
        assert np.isfinite(value), key
        if not key.startswith(("n_", "object_tp", "object_fp", "object_fn")):
            assert 0.0 <= value <= 1.0, key
