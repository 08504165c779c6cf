"""Segmentation metrics that do not hide tiny voids (numpy and scipy only; no torch).

Conventions (docs/metrics.md has the full text):

- A pixel is predicted positive when ``prob >= threshold`` (default 0.5).
- Objects are 8-connected components of the ground truth and of the prediction, per image.
- **Matching rule**: predicted and GT components are paired one-to-one, greedily by descending
  IoU, and a pair counts only when its IoU is at least ``iou_match`` (default 0.1). A GT object
  without a partner is a false negative, a predicted one a false positive. The default is low
  on purpose: for a 1-2 px void, a one-pixel localisation error already drops IoU below 0.5, so
  the usual 0.5 would count a correctly found tiny void as missed; 0.1 still accepts a 1 px
  void found by a 3x3 blob (IoU 1/9) and rejects one huge blob claiming a tiny void.
- **Empty cases**: per image, a ratio whose denominator is zero (empty GT and empty
  prediction) is 1.0: nothing to find and nothing falsely found is perfect agreement. Pooled
  recall with no GT objects is 1.0 and pooled precision with no predictions is 1.0 (vacuous);
  the counts are always reported next to them, so a vacuous 1.0 can be told apart.
- Boundary IoU follows Cheng et al. 2021: the boundary of a mask is the inner band of the pixels
  removed by ``d`` 3x3 erosions with a zero border, d = max(1, round(0.02 * diagonal)).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from scipy import ndimage

from segfactory.errors import DataError

DEFAULT_THRESHOLD = 0.5  # probability at or above which a pixel is a void
DEFAULT_IOU_MATCH = 0.1  # minimum component IoU for a match (see module docstring)
BOUNDARY_RATIO = 0.02  # band width as a fraction of the image diagonal (Cheng et al. 2021)
SIZE_BINS = ((1, 4), (4, 16), (16, 64), (64, 1 << 62))  # GT object area bins in pixels, [lo, hi)
SIZE_BIN_NAMES = ("tiny_lt4", "small_4_15", "medium_16_63", "large_ge64")
DEFAULT_MIN_SUPPORT = 20  # objects (or images) a slice needs before it can be the worst slice

_STRUCT_8 = np.zeros((3, 3, 3), dtype=bool)
_STRUCT_8[1] = True  # 8-connectivity inside an image, never across images


@dataclass
class PerImage:
    """Per-image metric arrays, all of length N, plus per-GT-object arrays of length M."""

    pixel_tp: np.ndarray  # (N,) int64
    pixel_fp: np.ndarray
    pixel_fn: np.ndarray
    pixel_iou: np.ndarray  # (N,) float64, 1.0 when GT and prediction are both empty
    dice: np.ndarray
    boundary_iou: np.ndarray
    object_tp: np.ndarray  # (N,) int64 matched GT objects
    object_fp: np.ndarray  # unmatched predicted components
    object_fn: np.ndarray  # unmatched GT components
    size_hits: np.ndarray  # (N, len(SIZE_BINS)) int64 matched GT objects per size bin
    size_count: np.ndarray  # (N, len(SIZE_BINS)) int64 GT objects per size bin
    gt_image: np.ndarray  # (M,) int64 image index of each GT object
    gt_area: np.ndarray  # (M,) int64 area in pixels
    gt_centroid: np.ndarray  # (M, 2) float64 (y, x)
    gt_matched: np.ndarray  # (M,) bool

    def __len__(self) -> int:
        return int(self.pixel_tp.shape[0])

    def to_dict(self) -> dict[str, list[object]]:
        """Every array as (nested) lists of its numbers, by field name."""
        return {f.name: getattr(self, f.name).tolist() for f in fields(self)}


def validate_inputs(prob: np.ndarray, gt: np.ndarray) -> None:
    """Raise DataError unless prob is finite float (N,H,W) in [0,1] and gt is {0,1} of the same shape."""
    if not isinstance(prob, np.ndarray) or not isinstance(gt, np.ndarray):
        raise DataError(f"metrics need numpy arrays; got {type(prob).__name__} and {type(gt).__name__}")
    if prob.ndim != 3 or not np.issubdtype(prob.dtype, np.floating):
        raise DataError(f"predictions must be float (N, H, W); got {prob.dtype} {prob.shape}")
    if gt.dtype not in (np.uint8, np.bool_) or gt.ndim != 3:
        raise DataError(f"ground truth must be uint8 (N, H, W); got {gt.dtype} {gt.shape}")
    if prob.shape[0] != gt.shape[0]:
        raise DataError(f"{prob.shape[0]} predictions for {gt.shape[0]} masks; counts must match")
    if prob.shape != gt.shape:
        raise DataError(f"prediction shape {prob.shape} differs from mask shape {gt.shape}")
    if prob.shape[0] == 0:
        raise DataError("no images to score: the dataset is empty")
    if not np.isfinite(prob).all():
        bad = int((~np.isfinite(prob)).sum())
        raise DataError(f"predictions contain {bad} NaN or inf values; the model output is broken")
    if prob.min() < 0 or prob.max() > 1:
        raise DataError(f"predictions must be probabilities in [0, 1]; got [{prob.min():g}, {prob.max():g}]")
    if gt.dtype == np.uint8 and gt.max() > 1:
        raise DataError(f"masks must hold 0 and 1 only; found {int(gt.max())}")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den with 1.0 where den == 0 (empty versus empty is perfect agreement)."""
    num = num.astype(np.float64)
    den = den.astype(np.float64)
    out = np.ones_like(num)
    np.divide(num, den, out=out, where=den > 0)
    return out


def boundary_band(mask: np.ndarray) -> np.ndarray:
    """Inner boundary band of each (N, H, W) mask: mask minus its d-fold 3x3 erosion (zero border)."""
    h, w = mask.shape[-2:]
    d = max(1, int(round(BOUNDARY_RATIO * float(np.hypot(h, w)))))
    m = mask.astype(bool)
    # d iterations of a 3x3 erosion with a zero border = one (2d+1)x(2d+1) min filter, zero padded
    eroded = ndimage.minimum_filter(m.view(np.uint8), size=(1, 2 * d + 1, 2 * d + 1), mode="constant", cval=0)
    return m & ~eroded.astype(bool)


def _components(
    mask: np.ndarray, centroids: bool = True
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """Label components; return (labels, count, image index, area, centroid) per label 1..count."""
    labels, count = ndimage.label(mask, structure=_STRUCT_8)
    flat = labels.ravel()
    nz = np.flatnonzero(flat)
    plane = mask.shape[1] * mask.shape[2]
    image = np.zeros(count + 1, dtype=np.int64)
    image[flat[nz]] = nz // plane
    area = np.bincount(flat[nz], minlength=count + 1).astype(np.int64)
    if not centroids:
        return labels, count, image[1:], area[1:], np.zeros((count, 2))
    ys = (nz % plane) // mask.shape[2]
    xs = nz % mask.shape[2]
    safe = np.maximum(area, 1)
    cy = np.bincount(flat[nz], weights=ys, minlength=count + 1) / safe
    cx = np.bincount(flat[nz], weights=xs, minlength=count + 1) / safe
    return labels, count, image[1:], area[1:], np.stack([cy[1:], cx[1:]], axis=1)


def _match(
    gt_lab: np.ndarray,
    n_gt: int,
    gt_area: np.ndarray,
    pr_lab: np.ndarray,
    n_pr: int,
    pr_area: np.ndarray,
    iou_match: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy one-to-one matching by descending IoU; returns (gt matched, pred matched) bool arrays."""
    gt_matched = np.zeros(n_gt, dtype=bool)
    pr_matched = np.zeros(n_pr, dtype=bool)
    both = (gt_lab > 0) & (pr_lab > 0)
    if not both.any():
        return gt_matched, pr_matched
    pair = gt_lab[both].astype(np.int64) * (n_pr + 1) + pr_lab[both]
    keys, inter = np.unique(pair, return_counts=True)
    g, p = keys // (n_pr + 1) - 1, keys % (n_pr + 1) - 1
    iou = inter / (gt_area[g] + pr_area[p] - inter)
    keep = iou >= iou_match
    g, p, iou = g[keep], p[keep], iou[keep]
    for k in np.argsort(-iou, kind="stable"):
        if not gt_matched[g[k]] and not pr_matched[p[k]]:
            gt_matched[g[k]] = True
            pr_matched[p[k]] = True
    return gt_matched, pr_matched


def size_bin_index(area: np.ndarray) -> np.ndarray:
    """Index into SIZE_BINS for each object area."""
    edges = np.array([lo for lo, _ in SIZE_BINS[1:]])
    return np.searchsorted(edges, area, side="right")


def per_image_metrics(
    prob: np.ndarray,
    gt: np.ndarray,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    iou_match: float = DEFAULT_IOU_MATCH,
) -> PerImage:
    """Every per-image metric for predictions ``prob`` against masks ``gt`` (both (N, H, W))."""
    validate_inputs(prob, gt)
    if not 0.0 < iou_match <= 1.0 or not 0.0 < threshold <= 1.0:
        raise DataError(f"need 0 < iou_match <= 1 and 0 < threshold <= 1; got {iou_match}, {threshold}")
    n = prob.shape[0]
    pred = prob >= threshold
    truth = gt.astype(bool)
    tp = (pred & truth).sum(axis=(1, 2), dtype=np.int64)
    fp = (pred & ~truth).sum(axis=(1, 2), dtype=np.int64)
    fn = (~pred & truth).sum(axis=(1, 2), dtype=np.int64)
    pb, gb = boundary_band(pred), boundary_band(truth)
    b_inter = (pb & gb).sum(axis=(1, 2), dtype=np.int64)
    b_union = (pb | gb).sum(axis=(1, 2), dtype=np.int64)
    gl, ng, g_img, g_area, g_cent = _components(truth)
    pl, npr, p_img, p_area, _ = _components(pred, centroids=False)
    g_hit, p_hit = _match(gl, ng, g_area, pl, npr, p_area, iou_match)
    n_bins = len(SIZE_BINS)
    cell = g_img * n_bins + size_bin_index(g_area)
    return PerImage(
        pixel_tp=tp,
        pixel_fp=fp,
        pixel_fn=fn,
        pixel_iou=_ratio(tp, tp + fp + fn),
        dice=_ratio(2 * tp, 2 * tp + fp + fn),
        boundary_iou=_ratio(b_inter, b_union),
        object_tp=np.bincount(g_img[g_hit], minlength=n).astype(np.int64),
        object_fp=np.bincount(p_img[~p_hit], minlength=n).astype(np.int64),
        object_fn=np.bincount(g_img[~g_hit], minlength=n).astype(np.int64),
        size_hits=np.bincount(cell[g_hit], minlength=n * n_bins).reshape(n, n_bins).astype(np.int64),
        size_count=np.bincount(cell, minlength=n * n_bins).reshape(n, n_bins).astype(np.int64),
        gt_image=g_img,
        gt_area=g_area,
        gt_centroid=g_cent,
        gt_matched=g_hit,
    )


def _safe(num: float, den: float) -> float:
    """num / den, 1.0 when den == 0 (vacuous; the counts are reported beside it)."""
    return float(num / den) if den > 0 else 1.0


def object_f1(arrays: tuple[np.ndarray, ...]) -> float:
    """Micro object F1 from per-image (TP, FP, FN) arrays: 2TP / (2TP + FP + FN)."""
    tp, fp, fn = (float(a.sum()) for a in arrays[:3])
    return _safe(2 * tp, 2 * tp + fp + fn)


def object_recall(arrays: tuple[np.ndarray, ...]) -> float:
    """Micro object recall from per-image (TP, FN) arrays."""
    tp, fn = float(arrays[0].sum()), float(arrays[1].sum())
    return _safe(tp, tp + fn)


def pixel_iou_micro(arrays: tuple[np.ndarray, ...]) -> float:
    tp, fp, fn = (float(a.sum()) for a in arrays[:3])
    return _safe(tp, tp + fp + fn)


def aggregate(per_image: PerImage) -> dict[str, float]:
    """Pooled (micro) and per-image-mean scores; see the module docstring for empty cases."""
    m = per_image
    tp, fp, fn = float(m.object_tp.sum()), float(m.object_fp.sum()), float(m.object_fn.sum())
    ptp, pfp, pfn = float(m.pixel_tp.sum()), float(m.pixel_fp.sum()), float(m.pixel_fn.sum())
    out = {
        "n_images": float(len(m)),
        "n_gt_objects": tp + fn,
        "n_pred_objects": tp + fp,
        "object_tp": tp,
        "object_fp": fp,
        "object_fn": fn,
        "object_recall": _safe(tp, tp + fn),
        "object_precision": _safe(tp, tp + fp),
        "object_f1": _safe(2 * tp, 2 * tp + fp + fn),
        "pixel_iou": _safe(ptp, ptp + pfp + pfn),
        "pixel_recall": _safe(ptp, ptp + pfn),
        "pixel_precision": _safe(ptp, ptp + pfp),
        "dice": _safe(2 * ptp, 2 * ptp + pfp + pfn),
        "mean_image_pixel_iou": float(m.pixel_iou.mean()),
        "mean_image_dice": float(m.dice.mean()),
        "boundary_iou": float(m.boundary_iou.mean()),
    }
    hits, counts = m.size_hits.sum(axis=0), m.size_count.sum(axis=0)
    for name, h, c in zip(SIZE_BIN_NAMES, hits, counts, strict=True):
        out[f"n_size_{name}"] = float(c)
        if c > 0:  # a bin with no objects has no recall; it is left out rather than invented
            out[f"recall_size_{name}"] = float(h / c)
    bad = [k for k, v in out.items() if not np.isfinite(v)]
    if bad:
        raise DataError(f"metrics {bad} are not finite; this is a bug in vision.metrics")
    return out
