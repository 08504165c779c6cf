"""``curate defects``: duplicate defects, distributions, bad masks, sampling weights, label errors.

- **Duplicate defects**: two defects whose mask crops are identical and whose mean-removed image
  patches (bbox grown by ``PATCH_MARGIN``) differ by at most ``PATCH_TOL`` on average: the same
  pixels seen twice (overlapping tiles, copied frames) or a generator repeating itself. Checked
  within train and across train/dev. On the demo set, independent look-alike defects come no
  closer than 0.0088, so a re-noised frame of the same defect (about 1.1 x the noise sigma) is
  left to the image-level embedding search.
- **Distributions**: area, contrast and shape of train defects against the target (dev), with a
  two-sample KS test for the numeric ones.
- **Bad masks**: the intensity step across the mask edge (inside minus a ring outside, as a
  z-score against the local noise, signed by the set's void polarity) is below ``EDGE_MIN_Z``
  while the mask shifted by ``EDGE_SHIFT`` pixels clears it (the intensity edge is elsewhere).
  On clean demo data about 1% of labelled images are flagged; they go to the review queue and
  are *not* removed by the plan: whether a label is wrong is a person's call.
- **Sampling weights**: per train image, inverse frequency of its rarest defect-size bin,
  normalised to mean 1, for defect-centred sampling in a training config.
- **Label errors** (with ``--model``): ``cleanlab.segmentation`` ranks train images by label
  quality from the model's probabilities; the ranking is written as a review queue.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import ndimage
from scipy.stats import ks_2samp

from analysis.curation.plan import Action, Plan, PlanItem
from segfactory.errors import DataError
from segfactory.files import write_atomic
from segfactory.records import Result
from synthetic.splits import Split
from vision.onnx_infer import predict

PATCH_MARGIN = 3  # pixels around a defect's bbox compared for duplicates
PATCH_TOL = 0.005  # mean absolute difference of mean-removed patches under which two defects are the same
EDGE_MIN_Z = 2.0  # a mask whose intensity step (z) is below this, while a shifted copy clears it, is suspect


class NumericDist(Result):
    """One defect attribute in train against the target (dev): deciles 1, 5, 9 and a KS test."""

    train_quantiles: list[float]
    target_quantiles: list[float]
    ks: float
    p: float


class ShapeCounts(Result):
    train: dict[str, int]
    target: dict[str, int]


class Distributions(Result):
    """Each numeric attribute that both splits record (absent otherwise), and the shape counts."""

    area: NumericDist | None = None
    contrast: NumericDist | None = None
    diameter: NumericDist | None = None
    shape: ShapeCounts


class BadMask(Result):
    image_id: int
    edge_z: float  # the intensity step across the mask edge, as a z-score
    shifted_z: float  # the best step of the mask shifted by EDGE_SHIFT pixels


class ReviewRow(Result):
    split: Literal["train"]
    image_id: int
    rank: int
    source: Literal["cleanlab", "mask-edge"]


class LabelReview(Result):
    queue: str | None  # the review queue's file (label-review.jsonl)
    n: int
    top: list[ReviewRow]  # the first 20


class DefectsReport(Result):
    """What ``curate defects`` reports. ``plan`` is set once the plan has been written."""

    dataset: str
    content_hash: str
    n_defects_train: int
    duplicate_defects_train: list[list[int]]  # pairs of train image ids, the first MAX_LISTED
    duplicate_defects_cross_split: list[list[int]]  # [train image id, dev image id]
    n_duplicate_defects: int
    distinct_mask_fraction: float
    distributions: Distributions
    bad_masks: list[BadMask]
    n_bad_masks: int
    sampling_weights: list[float]
    label_review: LabelReview
    plan_items: int
    plan: str | None = None


EDGE_SHIFT = 3  # pixels a mask is shifted to test its fit
SIZE_BINS = (0, 16, 64, 256, 10**9)  # defect area bins (pixels) for rebalancing
REVIEW_TOP = 100  # images written to the review queue
MAX_LISTED = 200


def _patch(split: Split, d: dict[str, Any]) -> tuple[bytes, np.ndarray]:
    y0, x0, y1, x1 = d["bbox"]
    i = int(d["image_id"])
    h, w = split.images.shape[1:]
    mask = np.asarray(split.masks[i, y0:y1, x0:x1])
    py0, px0 = max(0, y0 - PATCH_MARGIN), max(0, x0 - PATCH_MARGIN)
    py1, px1 = min(h, y1 + PATCH_MARGIN), min(w, x1 + PATCH_MARGIN)
    return mask.tobytes() + bytes(str(mask.shape), "ascii"), np.asarray(split.images[i, py0:py1, px0:px1])


def duplicate_defects(a: Split, b: Split | None = None) -> list[tuple[int, int]]:
    """Pairs of defect indices (into a.defects, into b.defects or a.defects) that are the same defect."""
    other = b if b is not None else a
    by_mask: dict[bytes, list[int]] = {}
    for k, d in enumerate(other.defects):
        by_mask.setdefault(_patch(other, d)[0], []).append(k)
    pairs = []
    for k, d in enumerate(a.defects):
        key, patch = _patch(a, d)
        for m in by_mask.get(key, []):
            if b is None and m <= k:
                continue
            q = _patch(other, other.defects[m])[1]
            if (
                q.shape == patch.shape
                and float(np.abs((q - q.mean()) - (patch - patch.mean())).mean()) <= PATCH_TOL
            ):
                pairs.append((k, m))
    return pairs


def _edge_z(img: np.ndarray, mask: np.ndarray, noise: float) -> float:
    """z-score of (mean inside - mean in a 2-pixel ring outside) for one mask placement."""
    ring = ndimage.binary_dilation(mask, iterations=2) & ~mask
    if not ring.any():
        return 0.0
    se = noise * np.sqrt(1 / mask.sum() + 1 / ring.sum())
    return float((img[mask].mean() - img[ring].mean()) / max(se, 1e-6))


def _edge_fit(split: Split, i: int) -> tuple[float, float]:
    """(z of the mask as drawn, best z of the mask shifted by EDGE_SHIFT pixels in 8 directions)."""
    mask = np.asarray(split.masks[i]).astype(bool)
    img = np.asarray(split.images[i], dtype=np.float64)
    far = ndimage.binary_dilation(mask, iterations=8) & ~ndimage.binary_dilation(mask, iterations=4)
    noise = float(np.std(img[far] - ndimage.uniform_filter(img, 5)[far])) if far.sum() > 8 else 0.01
    z0 = _edge_z(img, mask, noise)
    shifts = [
        (dy, dx) for dy in (-EDGE_SHIFT, 0, EDGE_SHIFT) for dx in (-EDGE_SHIFT, 0, EDGE_SHIFT) if dy or dx
    ]
    best = max(_edge_z(img, np.roll(mask, s, axis=(0, 1)), noise) for s in shifts)
    return z0, best


def distributions(train: Split, dev: Split) -> Distributions:
    out: dict[str, NumericDist] = {}
    for key in ("area", "contrast", "diameter"):
        t = np.array([d[key] for d in train.defects if d.get(key) is not None], dtype=float)
        v = np.array([d[key] for d in dev.defects if d.get(key) is not None], dtype=float)
        if len(t) and len(v):
            test = ks_2samp(t, v)
            out[key] = NumericDist(
                train_quantiles=np.quantile(t, [0.1, 0.5, 0.9]).round(4).tolist(),
                target_quantiles=np.quantile(v, [0.1, 0.5, 0.9]).round(4).tolist(),
                ks=round(float(test.statistic), 4),
                p=float(test.pvalue),
            )
    shape = ShapeCounts(
        train=dict(Counter(str(d.get("shape")) for d in train.defects)),
        target=dict(Counter(str(d.get("shape")) for d in dev.defects)),
    )
    return Distributions(**out, shape=shape)


def sampling_weights(train: Split) -> list[float]:
    """Per train image: inverse frequency of its rarest defect-size bin (mean 1; no defect -> base)."""
    bins = np.digitize([d["area"] for d in train.defects], SIZE_BINS[1:-1])
    freq = np.bincount(bins, minlength=len(SIZE_BINS) - 1).astype(float)
    per_image = np.ones(len(train))
    for d, b in zip(train.defects, bins, strict=True):
        per_image[int(d["image_id"])] = max(
            per_image[int(d["image_id"])], freq.sum() / max(freq[b], 1) / len(freq)
        )
    return (per_image / per_image.mean()).round(4).tolist()


def label_issue_ranking(masks: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Image indices from most to least suspect, by cleanlab.segmentation label quality."""
    from cleanlab.segmentation.rank import get_label_quality_scores

    pred = np.stack([1 - probs, probs], axis=1).astype(np.float32)  # (N, 2, H, W)
    scores, _ = get_label_quality_scores(np.asarray(masks, dtype=np.int64), pred, verbose=False)
    return np.argsort(scores, kind="stable")


def curate_defects(
    train: Split,
    dev: Split,
    *,
    dataset: str,
    content_hash: str,
    model: Path | None = None,
    review_queue: Path | None = None,
) -> tuple[DefectsReport, Plan]:
    if len(train) == 0:
        raise DataError(f"dataset {dataset} has an empty train split; there is nothing to curate")
    within = duplicate_defects(train)
    across = duplicate_defects(train, dev)
    labelled = sorted({int(d["image_id"]) for d in train.defects})
    fit = {i: _edge_fit(train, i) for i in labelled}
    sign = 1.0 if np.median([z0 for z0, _ in fit.values()] or [1.0]) >= 0 else -1.0  # the set's void polarity
    bad = sorted(i for i, (z0, best) in fit.items() if sign * z0 < EDGE_MIN_Z and sign * best >= EDGE_MIN_Z)
    items = [
        PlanItem(
            split="train",
            image_id=int(train.defects[a]["image_id"]),
            action=Action.REMOVE,
            reason=f"defect repeated from dev image {dev.defects[b]['image_id']}",
        )
        for a, b in across
    ]
    report = DefectsReport(
        dataset=dataset,
        content_hash=content_hash,
        n_defects_train=len(train.defects),
        duplicate_defects_train=[
            [train.defects[a]["image_id"], train.defects[b]["image_id"]] for a, b in within
        ][:MAX_LISTED],
        duplicate_defects_cross_split=[
            [train.defects[a]["image_id"], dev.defects[b]["image_id"]] for a, b in across
        ][:MAX_LISTED],
        n_duplicate_defects=len(within) + len(across),
        distinct_mask_fraction=round(1 - len(within) / max(1, len(train.defects)), 4),
        distributions=distributions(train, dev),
        bad_masks=[
            BadMask(image_id=i, edge_z=round(fit[i][0], 2), shifted_z=round(fit[i][1], 2)) for i in bad
        ][:MAX_LISTED],
        n_bad_masks=len(bad),
        sampling_weights=sampling_weights(train),
        label_review=_review(model, train, review_queue, bad),
        plan_items=len(items),
    )
    return report, Plan(kind="defects", dataset=dataset, content_hash=content_hash, items=items)


def _review(model: Path | None, train: Split, queue: Path | None, bad_masks: list[int]) -> LabelReview:
    """The label-review queue: cleanlab's ranking (with a model), then the bad-mask suspects."""
    rows: list[ReviewRow] = []
    if model is not None:
        probs = predict(model, np.ascontiguousarray(train.images, dtype=np.float32))
        order = label_issue_ranking(np.asarray(train.masks), probs)[:REVIEW_TOP]
        rows += [
            ReviewRow(split="train", image_id=int(i), rank=r, source="cleanlab") for r, i in enumerate(order)
        ]
    rows += [
        ReviewRow(split="train", image_id=i, rank=len(rows) + r, source="mask-edge")
        for r, i in enumerate(bad_masks)
    ]
    if queue is not None:
        queue.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(queue, "".join(json.dumps(row.as_json()) + "\n" for row in rows))
    return LabelReview(queue=str(queue) if queue else None, n=len(rows), top=rows[:20])
