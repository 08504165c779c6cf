"""Slice scores from split metadata, and the worst slice with a minimum support.

Defect slices group the voids listed in ``defects.jsonl`` by one attribute (a categorical value,
or a numeric attribute's tertile within this split) and score object recall on them. Image
slices group images by one acquisition parameter from ``images.jsonl`` and score micro object
F1 on them. A slice with fewer than ``min_support`` members (voids; for image slices, images
and also GT voids) is reported but can never be the worst slice: a recall over three voids is
noise, and a slice of void-free images only measures false positives (its F1 is 0 at the first
one), which the pooled precision already reports.

A listed defect is matched to the ground-truth component of its image whose centroid is nearest
to the centre of the defect's bbox; it counts as detected when that component was matched.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

import numpy as np

from segfactory.records import Result
from synthetic.splits import ImageMeta
from vision.metrics import DEFAULT_MIN_SUPPORT, PerImage, object_f1

DEFECT_NUMERIC = ("area", "diameter", "contrast", "thickness", "noise")
DEFECT_CATEGORICAL = ("shape", "edge")
IMAGE_SKIP = ("id", "sha256")
TERTILES = (1 / 3, 2 / 3)


class SliceRow(Result):
    """One slice: the members sharing one attribute's value, scored with its metric."""

    kind: Literal["defect", "image"]
    attribute: str
    value: str
    metric: Literal["object_recall", "object_f1"]
    support: int  # members: voids for a defect slice, images for an image slice
    n_objects: int | None = None  # image slices only: the GT voids in those images
    score: float
    eligible: bool  # enough support to be the worst slice


class SliceReport(Result):
    """Every slice, and the lowest-scoring eligible one (None when no slice reaches ``min_support``)."""

    min_support: int
    worst: SliceRow | None
    slices: list[SliceRow]


def defect_detected(
    per_image: PerImage, image_index: dict[str, int], defects: list[dict[str, Any]]
) -> np.ndarray:
    """(D,) bool: each listed defect's nearest GT component in its image was matched."""
    out = np.zeros(len(defects), dtype=bool)
    by_image: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(0, dtype=np.int64))
    for img in np.unique(per_image.gt_image):
        by_image[int(img)] = np.flatnonzero(per_image.gt_image == img)
    for k, d in enumerate(defects):
        objs = by_image[image_index.get(str(d.get("image_id")), -1)]
        if objs.size == 0 or "bbox" not in d:
            continue
        y0, x0, y1, x1 = d["bbox"]
        centre = np.array([(y0 + y1 - 1) / 2, (x0 + x1 - 1) / 2])
        dist = np.linalg.norm(per_image.gt_centroid[objs] - centre, axis=1)
        out[k] = bool(per_image.gt_matched[objs[int(np.argmin(dist))]])
    return out


def _groups(values: list[Any]) -> dict[str, np.ndarray]:
    """Slice label -> member indices; numeric values go into tertiles, others by value."""
    idx = np.arange(len(values))
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        arr = np.array([np.nan if v is None else float(v) for v in values])
        finite = np.isfinite(arr)
        if np.unique(arr[finite]).size > 3:
            lo, hi = np.quantile(arr[finite], TERTILES)
            return {
                f"<{lo:.4g}": idx[finite & (arr < lo)],
                f"[{lo:.4g},{hi:.4g})": idx[finite & (arr >= lo) & (arr < hi)],
                f">={hi:.4g}": idx[finite & (arr >= hi)],
            }
    out: dict[str, list[int]] = defaultdict(list)
    for i, v in enumerate(values):
        out[str(v)].append(i)
    return {k: np.array(v, dtype=np.int64) for k, v in out.items()}


def slice_scores(
    per_image: PerImage,
    image_meta: list[ImageMeta],
    defects: list[dict[str, Any]],
    min_support: int = DEFAULT_MIN_SUPPORT,
) -> list[SliceRow]:
    """Every defect slice (object recall) and image slice (object F1) with its support."""
    rows: list[SliceRow] = []
    index = {str(m.get("id")): i for i, m in enumerate(image_meta)}
    hit = defect_detected(per_image, index, defects)
    for attr in (*DEFECT_NUMERIC, *DEFECT_CATEGORICAL):
        if not defects or attr not in defects[0]:
            continue
        for label, members in _groups([d.get(attr) for d in defects]).items():
            rows.append(
                SliceRow(
                    kind="defect",
                    attribute=attr,
                    value=label,
                    metric="object_recall",
                    support=int(members.size),
                    score=float(hit[members].mean()) if members.size else 1.0,
                    eligible=bool(members.size >= min_support),
                )
            )
    keys = sorted({k for m in image_meta for k in m if k not in IMAGE_SKIP})
    counts = (per_image.object_tp, per_image.object_fp, per_image.object_fn)
    for key in keys:
        values = [m.get(key) for m in image_meta]
        if any(isinstance(v, dict | list) for v in values):
            continue
        for label, members in _groups(values).items():
            n_objects = int(per_image.object_tp[members].sum() + per_image.object_fn[members].sum())
            rows.append(
                SliceRow(
                    kind="image",
                    attribute=key,
                    value=label,
                    metric="object_f1",
                    support=int(members.size),
                    n_objects=n_objects,
                    score=object_f1(tuple(c[members] for c in counts)),
                    eligible=bool(members.size >= min_support and n_objects >= min_support),
                )
            )
    return rows


def worst_slice(
    per_image: PerImage,
    image_meta: list[ImageMeta],
    defects: list[dict[str, Any]],
    min_support: int = DEFAULT_MIN_SUPPORT,
) -> SliceReport:
    """The lowest-scoring eligible slice (None when no slice reaches ``min_support``) and all slices."""
    rows = slice_scores(per_image, image_meta, defects, min_support)
    eligible = [r for r in rows if r.eligible]
    worst = min(eligible, key=lambda r: r.score) if eligible else None
    return SliceReport(min_support=min_support, worst=worst, slices=rows)
