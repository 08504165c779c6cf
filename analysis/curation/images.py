"""``curate images``: duplicates, overlapping tiles, quality, coverage, hard images, split hygiene.

Works on a dataset version (``train/`` and ``dev/``). Images are streamed from the memory-mapped
arrays. The result is a report (counts, tables, pairs) and a plan (``analysis.curation.plan``)
that removes from *train* the later copy of every duplicate, every train image that is a near
duplicate of a dev image (split hygiene), and every image failing a quality check.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Literal

import numpy as np

from analysis.curation.neardup import (
    DUPLICATE_RMS,
    EMBED_MIN_COSINE,
    NEAR_NEIGHBOUR_BITS,
    Fingerprints,
    Pairs,
    candidate_pairs,
    embedding_pairs,
    fingerprint,
    thumbnail_rms,
    union,
)
from analysis.curation.plan import Action, Plan, PlanItem
from analysis.curation.tiles import Overlap, find_overlaps, trace_sources
from segfactory.errors import DataError
from segfactory.records import Result
from synthetic.check import BLANK_STD, SATURATED_FRACTION
from synthetic.splits import Split
from vision.onnx_infer import predict

SENSITIVITY_BITS = (24, 32, 40, 48)  # pHash thresholds shown in the sensitivity table (RMS rule applied)
SENSITIVITY_COSINE = (0.9, 0.93, 0.95, 0.97, 0.99)  # embedding thresholds shown
COVERAGE_FIELDS = ("part", "background")  # categorical acquisition fields
COVERAGE_NUMERIC = ("dose", "blur", "read_noise", "thickness")  # binned into COVERAGE_BINS
COVERAGE_BINS = 4
COVERAGE_MIN_FRACTION = 0.02  # a cell with fewer train images than this fraction of train is a gap
MAX_LISTED = 200  # pairs/items listed per finding in the report; the rest are counted
HARD_TOP = 50  # hard images listed


class ImageRef(Result):
    split: Literal["train", "dev"]
    id: int  # the image's index in its split


class ImagePair(Result):
    """Two near-duplicate images: pHash distance in bits and embedding cosine."""

    a: ImageRef
    b: ImageRef
    bits: int
    cosine: float


class Thresholds(Result):
    phash_bits: int
    thumbnail_rms: float
    embedding_cosine: float


class Tiles(Result):
    overlaps: list[Overlap]  # the first MAX_LISTED
    n_overlaps: int
    sources: list[dict[str, list[int]]]  # per source image: tile -> its (y, x) in the source frame


class CoverageCell(Result):
    value: str
    train: int
    dev: int
    gap: bool  # fewer train images than min_train_count


class CoverageGap(Result):
    field: str
    value: str
    train: int
    dev: int


class Coverage(Result):
    min_train_count: int
    table: dict[str, list[CoverageCell]]  # acquisition field -> its values (numeric ones binned)
    gaps: list[CoverageGap]


class SensitivityRow(Result):
    """How many pairs one threshold of one signal would call duplicates."""

    signal: Literal["phash_bits", "embedding_cosine"]
    threshold: int | float  # bits are whole numbers; a cosine is not
    pairs: int
    cross_split: int
    documented: bool  # the threshold this report uses


class HardImage(Result):
    image_id: int
    loss: float  # mean BCE against the mask
    uncertainty: float  # mean entropy of the model's probabilities, in bits


class ImagesReport(Result):
    """What ``curate images`` reports. ``plan`` is set once the plan has been written."""

    dataset: str
    content_hash: str
    n_train: int
    n_dev: int
    thresholds: Thresholds
    exact_duplicates: list[list[ImageRef]]  # groups, the first MAX_LISTED
    n_exact_groups: int
    near_duplicates_train: list[ImagePair]
    n_near_duplicates_train: int
    cross_split: list[ImagePair]
    n_cross_split: int
    tiles: Tiles
    quality: dict[str, list[int]]  # blank, saturated, artefact: train image indices
    coverage: Coverage
    sensitivity: list[SensitivityRow]
    hard_images: list[HardImage] | None  # None without --model
    plan_items: int
    plan: str | None = None


def _quality(images: np.ndarray, chunk: int = 1024) -> dict[str, list[int]]:
    """Blank, saturated and artefact (NaN/inf/out-of-range) images, by the data checks' constants."""
    found: dict[str, list[int]] = {"blank": [], "saturated": [], "artefact": []}
    for start in range(0, len(images), chunk):
        flat = np.asarray(images[start : start + chunk], dtype=np.float32).reshape(
            -1, images.shape[1] * images.shape[2]
        )
        bad = (
            ~np.isfinite(flat).all(axis=1)
            | (np.nan_to_num(flat) < 0).any(axis=1)
            | (np.nan_to_num(flat) > 1).any(axis=1)
        )
        clean = np.where(np.isfinite(flat), flat, 0.5)
        flat_signal = clean.std(axis=1) < BLANK_STD
        high = (clean >= 1).mean(axis=1) > SATURATED_FRACTION
        low = (clean <= 0).mean(axis=1) > SATURATED_FRACTION
        for name, mask in (
            ("artefact", bad),
            ("blank", flat_signal & ~high),
            ("saturated", high | (low & ~flat_signal)),
        ):
            found[name].extend((np.flatnonzero(mask) + start).tolist())
    return found


def _exact_groups(digests: list[str]) -> list[list[int]]:
    by_hash: dict[str, list[int]] = {}
    for i, d in enumerate(digests):
        by_hash.setdefault(d, []).append(i)
    return [g for g in by_hash.values() if len(g) > 1]


class _Joined:
    """Train then dev as one indexable stack (fancy indexing reads only the rows asked for)."""

    def __init__(self, train: np.ndarray, dev: np.ndarray) -> None:
        self.train, self.dev = train, dev

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        out = np.empty((len(idx), *self.train.shape[1:]), dtype=np.float32)
        first = idx < len(self.train)
        out[first] = self.train[idx[first]]
        out[~first] = self.dev[idx[~first] - len(self.train)]
        return out


def _sensitivity(pairs_bits: Pairs, rms: np.ndarray, pairs_cos: Pairs, n_train: int) -> list[SensitivityRow]:
    rows = []
    for bits in SENSITIVITY_BITS:
        keep = (pairs_bits.bits <= bits) & (rms <= DUPLICATE_RMS)
        cross = (pairs_bits.i[keep] < n_train) & (pairs_bits.j[keep] >= n_train)
        rows.append(
            SensitivityRow(
                signal="phash_bits",
                threshold=bits,
                pairs=int(keep.sum()),
                cross_split=int(cross.sum()),
                documented=bits == NEAR_NEIGHBOUR_BITS,
            )
        )
    for cos in SENSITIVITY_COSINE:
        keep = pairs_cos.cosine >= cos
        cross = (pairs_cos.i[keep] < n_train) & (pairs_cos.j[keep] >= n_train)
        rows.append(
            SensitivityRow(
                signal="embedding_cosine",
                threshold=cos,
                pairs=int(keep.sum()),
                cross_split=int(cross.sum()),
                documented=cos == EMBED_MIN_COSINE,
            )
        )
    return rows


def _coverage(train: Split, dev: Split) -> Coverage:
    table: dict[str, list[CoverageCell]] = {}
    gaps = []
    min_count = max(1, int(COVERAGE_MIN_FRACTION * len(train)))
    for field in COVERAGE_FIELDS + COVERAGE_NUMERIC:
        tv = [m.get(field) for m in train.image_meta]
        dv = [m.get(field) for m in dev.image_meta]
        if all(v is None for v in tv + dv):
            continue
        if field in COVERAGE_NUMERIC:
            both = np.array([v for v in tv + dv if v is not None], dtype=float)
            edges = np.linspace(both.min(), both.max() + 1e-9, COVERAGE_BINS + 1)
            tv = [
                f"[{edges[k]:.3g}, {edges[k + 1]:.3g})"
                for k in np.digitize(np.asarray([v for v in tv if v is not None]), edges[1:-1])
            ]
            dv = [
                f"[{edges[k]:.3g}, {edges[k + 1]:.3g})"
                for k in np.digitize(np.asarray([v for v in dv if v is not None]), edges[1:-1])
            ]
        tc, dc = Counter(map(str, tv)), Counter(map(str, dv))
        cells = []
        for value in sorted(set(tc) | set(dc)):
            gap = tc[value] < min_count
            cells.append(CoverageCell(value=value, train=tc[value], dev=dc[value], gap=gap))
            if gap:
                gaps.append(CoverageGap(field=field, value=value, train=tc[value], dev=dc[value]))
        table[field] = cells
    return Coverage(min_train_count=min_count, table=table, gaps=gaps)


def _hard_images(model: Path, train: Split) -> list[HardImage]:
    """Train images ranked by the model's loss (BCE against the mask) and mean uncertainty."""

    losses, uncert = [], []
    for start in range(0, len(train), 256):
        imgs = np.ascontiguousarray(train.images[start : start + 256], dtype=np.float32)
        prob = np.clip(predict(model, imgs), 1e-6, 1 - 1e-6)
        y = np.asarray(train.masks[start : start + 256], dtype=np.float32)
        losses.extend((-(y * np.log(prob) + (1 - y) * np.log(1 - prob))).mean(axis=(1, 2)).tolist())
        ent = -(prob * np.log2(prob) + (1 - prob) * np.log2(1 - prob))
        uncert.extend(ent.mean(axis=(1, 2)).tolist())
    order = np.argsort(losses)[::-1][:HARD_TOP]
    return [
        HardImage(image_id=int(i), loss=round(losses[i], 5), uncertainty=round(uncert[i], 5)) for i in order
    ]


def _pair_rows(pairs: Pairs, n_train: int) -> list[ImagePair]:
    return [
        ImagePair(
            a=_where(int(a), n_train), b=_where(int(b), n_train), bits=int(d), cosine=round(float(c), 4)
        )
        for a, b, d, c in zip(
            pairs.i[:MAX_LISTED],
            pairs.j[:MAX_LISTED],
            pairs.bits[:MAX_LISTED],
            pairs.cosine[:MAX_LISTED],
            strict=True,
        )
    ]


def curate_images(
    train: Split, dev: Split, *, dataset: str, content_hash: str, model: Path | None = None
) -> tuple[ImagesReport, Plan]:
    """The whole-image report and its plan for one dataset version."""
    if len(train) == 0:
        raise DataError(f"dataset {dataset} has an empty train split; there is nothing to curate")
    n_train = len(train)
    prints_t = fingerprint(train.images, exact=True)
    prints_d = fingerprint(dev.images, exact=True)
    prints = Fingerprints(
        np.concatenate([prints_t.hashes, prints_d.hashes]),
        np.concatenate([prints_t.embeddings, prints_d.embeddings]),
        (prints_t.sha256 or []) + (prints_d.sha256 or []),
    )
    by_bits = candidate_pairs(prints, max(SENSITIVITY_BITS))
    by_cos = embedding_pairs(prints, min(SENSITIVITY_COSINE))
    rms = thumbnail_rms(_Joined(train.images, dev.images), by_bits.i, by_bits.j)
    copies = (by_bits.bits <= NEAR_NEIGHBOUR_BITS) & (rms <= DUPLICATE_RMS)
    near = union(
        Pairs(by_bits.i[copies], by_bits.j[copies], by_bits.bits[copies], by_bits.cosine[copies]),
        by_cos.where(10**6, EMBED_MIN_COSINE),
    )
    exact = _exact_groups(prints.sha256 or [])
    within = near.j < n_train  # i < j, so both in train
    cross = (near.i < n_train) & (near.j >= n_train)
    overlaps = find_overlaps(train.images)
    quality = _quality(train.images)
    items = _plan_items(exact, near, within, cross, overlaps, quality, n_train)
    report = ImagesReport(
        dataset=dataset,
        content_hash=content_hash,
        n_train=n_train,
        n_dev=len(dev),
        thresholds=Thresholds(
            phash_bits=NEAR_NEIGHBOUR_BITS, thumbnail_rms=DUPLICATE_RMS, embedding_cosine=EMBED_MIN_COSINE
        ),
        exact_duplicates=[[_where(k, n_train) for k in g] for g in exact[:MAX_LISTED]],
        n_exact_groups=len(exact),
        near_duplicates_train=_pair_rows(
            Pairs(near.i[within], near.j[within], near.bits[within], near.cosine[within]), n_train
        ),
        n_near_duplicates_train=int(within.sum()),
        cross_split=_pair_rows(
            Pairs(near.i[cross], near.j[cross], near.bits[cross], near.cosine[cross]), n_train
        ),
        n_cross_split=int(cross.sum()),
        tiles=Tiles(
            overlaps=overlaps[:MAX_LISTED],
            n_overlaps=len(overlaps),
            sources=[{str(k): list(v) for k, v in g.items()} for g in trace_sources(overlaps)],
        ),
        quality=quality,
        coverage=_coverage(train, dev),
        sensitivity=_sensitivity(by_bits, rms, by_cos, n_train),
        hard_images=_hard_images(model, train) if model is not None else None,
        plan_items=len(items),
    )
    return report, Plan(kind="images", dataset=dataset, content_hash=content_hash, items=items)


def _where(k: int, n_train: int) -> ImageRef:
    return ImageRef(split="train", id=k) if k < n_train else ImageRef(split="dev", id=k - n_train)


def _plan_items(
    exact: list[list[int]],
    near: Pairs,
    within: np.ndarray,
    cross: np.ndarray,
    overlaps: list[Overlap],
    quality: dict[str, list[int]],
    n_train: int,
) -> list[PlanItem]:
    """Remove from train: later copies, train members of cross-split pairs, overlap tiles, bad images."""
    reasons: dict[int, str] = {}
    for group in exact:
        train_ids = [k for k in group if k < n_train]
        has_dev = any(k >= n_train for k in group)
        for k in train_ids if has_dev else train_ids[1:]:
            reasons.setdefault(
                k, "exact duplicate" + (" of a dev image" if has_dev else f" of train {train_ids[0]}")
            )
    for a, b in zip(near.i[cross].tolist(), near.j[cross].tolist(), strict=True):
        reasons.setdefault(a, f"near duplicate of dev {b - n_train} (split hygiene)")
    for a, b in zip(near.i[within].tolist(), near.j[within].tolist(), strict=True):
        if a not in reasons:
            reasons.setdefault(b, f"near duplicate of train {a}")
    for o in overlaps:
        if o.a not in reasons:
            reasons.setdefault(o.b, f"overlapping tile of train {o.a} at offset ({o.dy}, {o.dx})")
    for kind, ids in quality.items():
        for k in ids:
            reasons.setdefault(k, f"quality: {kind}")
    return [
        PlanItem(split="train", image_id=k, action=Action.REMOVE, reason=r)
        for k, r in sorted(reasons.items())
    ]
