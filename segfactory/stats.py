"""Statistics shared by metrics, the gate, analysis and the controls.

Everything here is deterministic given its ``seed``: the gate's verdicts depend on it (trust
rule 4). Bootstrap functions resample *images* (the unit of independent evidence) and take the
per-image arrays as a tuple, so ratio metrics such as micro object F1 are recomputed from
resampled counts rather than averaged per image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_N_BOOT = 2000  # bootstrap resamples; the interval's Monte Carlo error is ~1/sqrt(n)
DEFAULT_ALPHA = 0.05  # two-sided: 95% intervals

Arrays = tuple[np.ndarray, ...]
Statistic = Callable[[Arrays], float]


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use: it takes about half a second, and most importers of
    this module (the records that carry an ``Interval``) never compute a quantile."""
    from scipy import stats

    return stats


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided ``1 - alpha`` interval."""

    estimate: float
    low: float
    high: float
    alpha: float = DEFAULT_ALPHA

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def as_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "alpha": self.alpha}


def _as_arrays(arrays: np.ndarray | Sequence[np.ndarray]) -> Arrays:
    if isinstance(arrays, np.ndarray):
        return (np.asarray(arrays, dtype=np.float64),)
    out = tuple(np.asarray(a, dtype=np.float64) for a in arrays)
    lengths = {a.shape[0] for a in out}
    if len(lengths) != 1:
        raise ValueError(f"per-image arrays must have equal length; got {sorted(lengths)}")
    return out


def _mean(arrays: Arrays) -> float:
    return float(np.mean(arrays[0]))


def _resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) indices; the same seed gives the same resamples in every process."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.integers(0, n, size=(n_boot, n))


def bootstrap_ci(
    arrays: np.ndarray | Sequence[np.ndarray],
    statistic: Statistic = _mean,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
) -> Interval:
    """Percentile bootstrap interval of ``statistic`` over images.

    ``arrays`` is one (N,) array or a tuple of them (e.g. per-image TP, FP, FN counts).
    Raises ValueError on an empty sample: an interval over nothing is not a number.
    """
    data = _as_arrays(arrays)
    n = data[0].shape[0]
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    estimate = statistic(data)
    idx = _resample_indices(n, n_boot, seed)
    boots = np.array([statistic(tuple(a[row] for a in data)) for row in idx])
    low, high = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return Interval(float(estimate), float(low), float(high), alpha)


def paired_bootstrap_diff(
    arrays_a: np.ndarray | Sequence[np.ndarray],
    arrays_b: np.ndarray | Sequence[np.ndarray],
    statistic: Statistic = _mean,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
) -> Interval:
    """Interval of ``statistic(b) - statistic(a)`` resampling the same images for both.

    ``a`` is the reference (current best), ``b`` the candidate: a positive difference means
    the candidate is better for a higher-is-better statistic.
    """
    data_a, data_b = _as_arrays(arrays_a), _as_arrays(arrays_b)
    n = data_a[0].shape[0]
    if n == 0 or data_b[0].shape[0] != n:
        raise ValueError(f"paired bootstrap needs equal, non-empty samples; got {n} and {data_b[0].shape[0]}")
    estimate = statistic(data_b) - statistic(data_a)
    idx = _resample_indices(n, n_boot, seed)
    boots = np.array(
        [statistic(tuple(x[row] for x in data_b)) - statistic(tuple(x[row] for x in data_a)) for row in idx]
    )
    low, high = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return Interval(float(estimate), float(low), float(high), alpha)


def wilson_interval(k: int, n: int, alpha: float = DEFAULT_ALPHA) -> Interval:
    """Wilson score interval for a binomial proportion k/n (n = 0 gives [0, 1])."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n; got k={k}, n={n}")
    if n == 0:
        return Interval(0.0, 0.0, 1.0, alpha)
    z = float(_scipy_stats().norm.ppf(1 - alpha / 2))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, float(centre - half)), min(1.0, float(centre + half)), alpha)


def clopper_pearson_interval(k: int, n: int, alpha: float = DEFAULT_ALPHA) -> Interval:
    """Exact (Clopper–Pearson) interval for a binomial proportion k/n."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n; got k={k}, n={n}")
    if n == 0:
        return Interval(0.0, 0.0, 1.0, alpha)
    low = 0.0 if k == 0 else float(_scipy_stats().beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(_scipy_stats().beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Interval(k / n, low, high, alpha)


def benjamini_hochberg(
    pvalues: Sequence[float] | np.ndarray, q: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini–Hochberg step-up procedure.

    Returns ``(rejected, adjusted)``: a boolean mask of discoveries at FDR ``q`` and the
    BH-adjusted p-values, both in the input order. NaN p-values are never rejected.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if m == 0:
        return np.zeros(0, dtype=bool), np.zeros(0)
    filled = np.where(np.isnan(p), 1.0, p)
    order = np.argsort(filled, kind="stable")
    ranked = filled[order] * m / np.arange(1, m + 1)
    adjusted_sorted = np.minimum.accumulate(ranked[::-1])[::-1].clip(max=1.0)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    rejected = (adjusted <= q) & ~np.isnan(p)
    return rejected, adjusted


def expected_max_of_normals(n: int, sigma: float = 1.0) -> float:
    """E[max of n iid N(0, sigma²)]: how far the best of n noisy runs sits above the mean.

    Computed by numerical integration; used to state the selection effect of a search.
    """
    if n < 1:
        raise ValueError(f"need at least one run; got {n}")
    grid = np.linspace(-8.0, 8.0, 4001)
    pdf = n * _scipy_stats().norm.pdf(grid) * _scipy_stats().norm.cdf(grid) ** (n - 1)
    return float(sigma * np.trapezoid(grid * pdf, grid))


def bootstrap_mean_ci(
    values: np.ndarray,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
) -> Interval:
    """``bootstrap_ci`` of the mean, vectorised: the same resamples, one numpy call.

    Used where many intervals are needed at once (slice tables). Raises ValueError when empty.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("cannot bootstrap an empty sample")
    boots = data[_resample_indices(data.size, n_boot, seed)].mean(axis=1)
    low, high = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return Interval(float(data.mean()), float(low), float(high), alpha)


def t_interval(values: Sequence[float] | np.ndarray, confidence: float) -> Interval | None:
    """The mean of independent replicates (seeds, repetitions) with its two-sided Student t
    interval at ``confidence``; None below two values, where the spread is not measured."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return None
    mean = float(x.mean())
    half = float(_scipy_stats().t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return Interval(mean, mean - half, mean + half, 1.0 - confidence)


def noise_edge(noise: Sequence[float], upper: bool, level: float | None) -> float:
    """The edge of the seed-noise band in one direction, for a statistic measured against a
    reference model (so the reference itself contributes 0).

    The unplanted models' values are ``[0, *noise]``. Their range alone is too narrow: a new
    unplanted model lands above the largest of n others with probability 1/(n + 1), 1 in 5 with
    four, so a null run would show a "finding" that often on each statistic. With three or more values
    the edge is also pushed out to the one-sided ``level`` prediction bound of a new draw, mean
    ± t(level, n - 1) · sd · sqrt(1 + 1/n); the edge is whichever of the two lies further out
    (``level`` None: the range alone).
    """
    values = np.array([0.0, *noise], dtype=np.float64)
    edge = float(values.max() if upper else values.min())
    if level is None or values.size < 3:
        return edge
    n = values.size
    spread = float(_scipy_stats().t.ppf(level, n - 1) * values.std(ddof=1) * np.sqrt(1.0 + 1.0 / n))
    bound = float(values.mean() + spread) if upper else float(values.mean() - spread)
    return max(edge, bound) if upper else min(edge, bound)
