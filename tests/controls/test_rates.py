"""The interval and bookkeeping functions, against scipy's own binomial intervals."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from controls.rates import Yield, false_win_rate, is_false_win, rate, selection_effect
from segfactory.stats import Interval

CASES = [(0, 1), (0, 20), (1, 20), (3, 7), (10, 20), (19, 20), (20, 20), (5, 300)]


@pytest.mark.parametrize(("k", "n"), CASES)
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ours = rate(k, n).wilson
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert ours.low == pytest.approx(ref.low, abs=1e-9)
    assert ours.high == pytest.approx(ref.high, abs=1e-9)


@pytest.mark.parametrize(("k", "n"), CASES)
def test_clopper_pearson_matches_scipy(k: int, n: int) -> None:
    ours = false_win_rate(k, n).clopper_pearson
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert ours.low == pytest.approx(ref.low, abs=1e-9)
    assert ours.high == pytest.approx(ref.high, abs=1e-9)


def test_rate_of_no_wins_is_unknown_and_bad_counts_raise() -> None:
    empty = false_win_rate(0, 0)
    assert empty.estimate is None
    assert (empty.wilson.low, empty.wilson.high) == (0.0, 1.0)
    with pytest.raises(ValueError):
        rate(3, 2)


@pytest.mark.parametrize(
    ("estimate", "low", "high", "margin", "false"),
    [
        (0.0, -0.02, 0.02, 0.0, True),  # a point estimate of exactly zero is false
        (-0.01, -0.03, 0.01, 0.0, True),  # below zero
        (0.01, -0.01, 0.03, 0.0, False),  # positive, interval straddles: not (yet) false
        (0.01, 0.002, 0.008, 0.01, True),  # whole interval below the margin
        (0.02, 0.005, 0.03, 0.01, False),  # interval reaches the margin
    ],
)
def test_false_win_definition(estimate: float, low: float, high: float, margin: float, false: bool) -> None:
    assert is_false_win(Interval(estimate, low, high), margin) is false


def test_selection_effect_for_the_runs_actually_run() -> None:
    effect = selection_effect([0.50, 0.52, 0.48, 0.51, 0.49])
    assert effect.n == 5
    assert effect.expected_max_sigmas == pytest.approx(1.16296, abs=1e-3)  # E[max of 5 N(0,1)]
    assert effect.expected_gain == pytest.approx(effect.sigma * effect.expected_max_sigmas)
    assert selection_effect([0.5]).expected_gain == 0.0
    with pytest.raises(ValueError):
        selection_effect([])


def test_yield_per_device_hour_and_llm_cost_per_promoted_win() -> None:
    y = Yield(promoted=2, device_seconds=1800.0, llm_tokens=10_000, llm_seconds=30.0).as_dict()
    assert y["promoted_per_device_hour"] == pytest.approx(4.0)
    assert y["llm_tokens_per_promoted_win"] == pytest.approx(5000.0)
    none = Yield(promoted=0, device_seconds=0.0, llm_tokens=5, llm_seconds=1.0).as_dict()
    assert none["promoted_per_device_hour"] is None and none["llm_tokens_per_promoted_win"] is None
