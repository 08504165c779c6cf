"""Interval functions against scipy's reference implementations and known cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from segfactory.stats import (
    benjamini_hochberg,
    bootstrap_ci,
    clopper_pearson_interval,
    expected_max_of_normals,
    noise_edge,
    paired_bootstrap_diff,
    t_interval,
    wilson_interval,
)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (17, 40), (1, 1), (250, 1000)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    got = wilson_interval(k, n)
    assert got.low == pytest.approx(ref.low, abs=1e-9)
    assert got.high == pytest.approx(ref.high, abs=1e-9)
    assert got.estimate == k / n


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (17, 40), (1, 1), (250, 1000)])
def test_clopper_pearson_matches_scipy(k: int, n: int) -> None:
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    got = clopper_pearson_interval(k, n)
    assert got.low == pytest.approx(ref.low, abs=1e-9)
    assert got.high == pytest.approx(ref.high, abs=1e-9)


def test_proportion_bad_counts_raise() -> None:
    with pytest.raises(ValueError):
        wilson_interval(5, 3)
    with pytest.raises(ValueError):
        clopper_pearson_interval(-1, 3)


def test_bootstrap_is_deterministic_and_covers_the_mean() -> None:
    """Coverage on a synthetic case: the 95% interval holds the true mean about 95% of the time."""
    rng = np.random.default_rng(1)
    hits = 0
    trials = 200
    for t in range(trials):
        sample = rng.normal(0.3, 1.0, size=60)
        ci = bootstrap_ci(sample, n_boot=400, seed=t)
        hits += ci.contains(0.3)
    assert 0.88 <= hits / trials <= 0.99
    a = bootstrap_ci(np.arange(10.0), seed=7)
    b = bootstrap_ci(np.arange(10.0), seed=7)
    assert a == b


def test_bootstrap_ratio_statistic_on_counts() -> None:
    tp = np.array([1, 0, 2, 1, 1.0])
    fp = np.array([0, 1, 0, 0, 1.0])
    fn = np.array([1, 0, 0, 1, 0.0])

    def f1(arrays: tuple[np.ndarray, ...]) -> float:
        t, p, n = (x.sum() for x in arrays)
        return float(2 * t / (2 * t + p + n))

    ci = bootstrap_ci((tp, fp, fn), f1, n_boot=300)
    assert ci.estimate == pytest.approx(2 * 5 / (2 * 5 + 2 + 2))
    assert ci.low <= ci.estimate <= ci.high


def test_paired_diff_sign_and_empty() -> None:
    base = np.random.default_rng(0).normal(size=200)
    better = base + 0.5
    ci = paired_bootstrap_diff(base, better, n_boot=500)
    assert ci.estimate == pytest.approx(0.5)
    assert ci.low == pytest.approx(0.5) and ci.high == pytest.approx(0.5)
    with pytest.raises(ValueError):
        paired_bootstrap_diff(np.zeros(0), np.zeros(0))


def test_benjamini_hochberg_known_case() -> None:
    p = [0.01, 0.04, 0.03, 0.005, 0.2, float("nan")]
    rejected, adjusted = benjamini_hochberg(p, q=0.05)
    # sorted: 0.005 <= 1/6*q and 0.01 <= 2/6*q pass; 0.03 > 3/6*q stops the step-up
    assert rejected.tolist() == [True, False, False, True, False, False]
    assert adjusted[3] == pytest.approx(0.03)
    assert adjusted[1] == pytest.approx(0.06)


def test_expected_max_grows_with_n() -> None:
    assert expected_max_of_normals(1) == pytest.approx(0.0, abs=1e-6)
    assert expected_max_of_normals(2) == pytest.approx(1 / np.sqrt(np.pi), abs=1e-4)
    assert expected_max_of_normals(100) > expected_max_of_normals(10) > 1.0


def test_noise_edge_is_the_prediction_bound_or_the_range_whichever_is_further() -> None:
    # values [0, .01, .02, .03]: mean .015, sd .0129; t(.95, 3) = 2.353; sqrt(1 + 1/4) = 1.118
    assert noise_edge([0.01, 0.02, 0.03], upper=True, level=0.95) == pytest.approx(
        0.015 + 2.3534 * 0.012910 * 1.1180, abs=1e-4
    )
    assert noise_edge([0.01, 0.02, 0.03], upper=False, level=0.95) == pytest.approx(
        0.015 - 2.3534 * 0.012910 * 1.1180, abs=1e-4
    )
    assert (
        noise_edge([0.05], upper=True, level=0.95) == 0.05
        and noise_edge([0.05], upper=False, level=0.95) == 0.0
    )  # < 3 values: range
    assert noise_edge([-0.2, -0.1, -0.3], upper=True, level=0.95) >= 0.0  # never inside the range


def test_noise_edge_holds_a_new_null_draw_at_its_level_where_the_range_does_not() -> None:
    """Exchangeable draws: a new one passes the range of 4 others 1 time in 5; the edge, ~1 in 20."""
    rng = np.random.default_rng(0)
    sims = rng.normal(size=(4000, 5))
    past_edge = past_range = 0
    for row in sims:
        twins, new = row[1:4] - row[0], row[4] - row[0]  # each against the reference, row[0]
        past_edge += new > noise_edge(list(twins), upper=True, level=0.95)
        past_range += new > max(0.0, *twins)
    assert 0.035 <= past_edge / len(sims) <= 0.065
    assert 0.17 <= past_range / len(sims) <= 0.23


def test_t_interval_of_replicates_matches_the_textbook_and_needs_two_values() -> None:
    found = t_interval([1.0, 2.0, 3.0], 0.90)
    assert found is not None and found.estimate == 2.0 and found.alpha == pytest.approx(0.10)
    # sd 1, n 3: half-width t(0.95, 2) / sqrt(3) = 2.919986 / 1.732051 = 1.685855
    assert found.low == pytest.approx(2.0 - 1.685855, abs=1e-5) and found.high == pytest.approx(
        3.685855, abs=1e-5
    )
    assert t_interval([0.5], 0.90) is None and t_interval([], 0.90) is None
