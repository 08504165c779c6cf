"""Intensity, contrast and noise statistics of a set, and whether another set lies outside them.

A model scored on images unlike anything it was trained on (a 12-bit set read as 16-bit, say)
finds nothing, and that is a finding about the data, not the model. ``set_stats`` summarises a
split by per-image (and per-void) distributions; ``compare`` puts a set's medians against a
training set's ranges and marks it outside when any statistic lies beyond ``SHIFT_FACTOR``
times the training range:

- ``intensity``: per-image mean intensity (in the [0, 1] units models read);
- ``spread``: per-image 99th minus 1st percentile (how much of the range an image uses);
- ``noise``: per-image standard deviation of ``image - gaussian(image, NOISE_SIGMA_PX)``;
- ``contrast``: per-void Michelson contrast ``|v - r| / (v + r)`` against the ring
  ``0 < d <= RING_PX`` around the void (only when both sets are labelled).

The training range of a statistic is its ``TRAIN_QUANTILES`` range over the training images
(voids); the set is outside when its median is below ``low / SHIFT_FACTOR`` or above
``high * SHIFT_FACTOR``. Every quantity is an aggregate: no image leaves this module.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import ndimage

from synthetic.splits import Split

STATS_VERSION = (
    1  # bump when a statistic's definition changes; cached stats of another version are recomputed
)
MAX_STATS_IMAGES = 256  # images summarised per set, evenly spaced; past this the stats are of a sample
CHUNK_IMAGES = 16  # images filtered at a time (memory stays bounded on large detector images)
NOISE_SIGMA_PX = 2.0  # Gaussian that removes structure before the noise estimate
RING_PX = 2  # ring width outside a void for its local background (as data import uses)
TRAIN_QUANTILES = (0.025, 0.975)  # the training range of a statistic
SHIFT_FACTOR = 2.0  # a set's median further than this factor beyond the training range is outside it
STAT_NAMES = ("intensity", "spread", "noise", "contrast")
BOUND = (
    f"a statistic is outside the training range when the set's median lies below the training "
    f"images' {TRAIN_QUANTILES[0]:.1%} quantile / {SHIFT_FACTOR:g} or above their "
    f"{TRAIN_QUANTILES[1]:.1%} quantile x {SHIFT_FACTOR:g}"
)
_STRUCT = np.zeros((3, 3, 3), dtype=bool)
_STRUCT[1] = True  # 8-connected voids within an image, never across images


class Dist(BaseModel):
    """A distribution by three numbers: the training quantiles and the median."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float
    median: float
    high: float
    n: int


class IntensityStats(BaseModel):
    """The statistics of one set (cached in a split's manifest under ``intensity``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = STATS_VERSION
    content_hash: str | None  # the split these describe
    n_images: int
    n_sampled: int
    pixel_range: tuple[float, float]  # smallest and largest value over the sampled images
    intensity: Dist
    spread: Dist
    noise: Dist
    contrast: Dist | None  # None when the set has no voids


def _dist(values: np.ndarray) -> Dist | None:
    values = values[np.isfinite(values)]
    if not values.size:
        return None
    low, median, high = np.quantile(values, (TRAIN_QUANTILES[0], 0.5, TRAIN_QUANTILES[1]))
    return Dist(
        low=round(float(low), 6),
        median=round(float(median), 6),
        high=round(float(high), 6),
        n=int(values.size),
    )


def void_contrast(images: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """(V,) Michelson contrast of every void against the ring of RING_PX pixels around it."""
    labels, count = ndimage.label(masks > 0, structure=_STRUCT)
    if count == 0:
        return np.zeros(0)
    vals = images.astype(np.float64)
    area = np.bincount(labels.ravel(), minlength=count + 1)[1:]
    inside = np.bincount(labels.ravel(), weights=vals.ravel(), minlength=count + 1)[1:] / np.maximum(area, 1)
    grown = ndimage.grey_dilation(labels, footprint=np.ones((1, 2 * RING_PX + 1, 2 * RING_PX + 1), bool))
    ring = (labels == 0) & (grown > 0)  # where two rings meet, the higher label takes the pixel
    ring_n = np.bincount(grown[ring], minlength=count + 1)[1:]
    ring_mean = np.bincount(grown[ring], weights=vals[ring], minlength=count + 1)[1:] / np.maximum(ring_n, 1)
    contrast = np.abs(inside - ring_mean) / np.maximum(inside + ring_mean, 1e-9)
    result: np.ndarray = contrast[ring_n > 0]
    return result


def _chunk_values(x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, ...]:
    """(mean, spread, noise) per image and contrast per void of one chunk."""
    flat = x.reshape(len(x), -1)
    low, high = np.percentile(flat, (1, 99), axis=1)
    residual = x - ndimage.gaussian_filter(x, sigma=(0, NOISE_SIGMA_PX, NOISE_SIGMA_PX))
    return flat.mean(axis=1), high - low, residual.reshape(len(x), -1).std(axis=1), void_contrast(x, m)


def set_stats(
    images: np.ndarray, masks: np.ndarray | None, content_hash: str | None = None
) -> IntensityStats:
    """The statistics of an (N, H, W) float set in [0, 1] (a sample of MAX_STATS_IMAGES when larger)."""
    n = int(images.shape[0])
    take = (
        np.unique(np.linspace(0, n - 1, min(n, MAX_STATS_IMAGES)).round().astype(int))
        if n
        else np.zeros(0, int)
    )
    parts: list[tuple[np.ndarray, ...]] = []
    lo, hi = np.inf, -np.inf
    for start in range(0, len(take), CHUNK_IMAGES):  # chunks bound memory on large detector images
        idx = take[start : start + CHUNK_IMAGES]
        x = np.asarray(images[idx], dtype=np.float32)
        m = np.asarray(masks[idx]) if masks is not None else np.zeros(x.shape, np.uint8)
        lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
        parts.append(_chunk_values(x, m))
    values = [np.concatenate(col) if parts else np.zeros(0) for col in zip(*parts, strict=True)] or [
        np.zeros(0)
    ] * 4
    empty = Dist(low=0.0, median=0.0, high=0.0, n=0)
    return IntensityStats(
        content_hash=content_hash,
        n_images=n,
        n_sampled=len(take),
        pixel_range=(lo, hi) if parts else (0.0, 0.0),
        intensity=_dist(values[0]) or empty,
        spread=_dist(values[1]) or empty,
        noise=_dist(values[2]) or empty,
        contrast=_dist(values[3]),
    )


def split_stats(split: Split) -> IntensityStats:
    """A split's statistics: those cached in its manifest when they describe this content, else computed."""
    cached = split.manifest.get("intensity")
    if (
        isinstance(cached, dict)
        and cached.get("version") == STATS_VERSION
        and split.content_hash
        and cached.get("content_hash") == split.content_hash
    ):
        return IntensityStats.model_validate(cached)
    return set_stats(split.images, split.masks if split.masks.any() else None, split.content_hash or None)


class StatRange(BaseModel):
    """One statistic of a set (its median) against the training images' range of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    set_median: float
    train_low: float
    train_high: float
    bound_low: float
    bound_high: float
    outside: bool


class RangeCheck(BaseModel):
    """A set's statistics against the training data's: ``outside`` if any lies beyond its bound."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outside: bool
    stats: dict[str, StatRange | None]  # None: unlabelled on one side (contrast) or nothing to measure
    reasons: list[str]
    bound: str  # the rule, in words


def compare(seen: IntensityStats, train: IntensityStats) -> RangeCheck:
    """Each statistic of ``seen`` (its median) against ``train``'s range; ``outside`` if any is beyond it."""
    rows: dict[str, StatRange | None] = {}
    reasons = []
    for name in STAT_NAMES:
        got, ref = getattr(seen, name), getattr(train, name)
        if got is None or ref is None or got.n == 0 or ref.n == 0:
            rows[name] = None  # unlabelled on one side (contrast) or nothing to measure
            continue
        lo, hi = ref.low / SHIFT_FACTOR, ref.high * SHIFT_FACTOR
        outside = not lo <= got.median <= hi
        rows[name] = StatRange(
            set_median=got.median,
            train_low=ref.low,
            train_high=ref.high,
            bound_low=round(lo, 6),
            bound_high=round(hi, 6),
            outside=outside,
        )
        if outside:
            side = "below" if got.median < lo else "above"
            reasons.append(
                f"{name}: the set's median {got.median:.4g} is {side} the training range "
                f"{ref.low:.4g}..{ref.high:.4g} (bound {lo:.4g}..{hi:.4g})"
            )
    return RangeCheck(outside=bool(reasons), stats=rows, reasons=reasons, bound=BOUND)
