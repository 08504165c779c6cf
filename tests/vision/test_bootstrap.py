"""Bootstrap intervals over images: coverage on a synthetic case, and paired comparisons."""

from __future__ import annotations

import numpy as np

from segfactory.stats import bootstrap_ci, paired_bootstrap_diff
from vision.metrics import object_f1, object_recall

TRUE_RECALL = 0.3


def simulated_counts(rng: np.random.Generator, n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-image (TP, FN): Poisson many voids per image, each found with probability 0.3."""
    n_obj = rng.poisson(3, n_images)
    tp = rng.binomial(n_obj, TRUE_RECALL)
    return tp, n_obj - tp


def test_object_recall_interval_covers_truth() -> None:
    rng = np.random.default_rng(7)
    trials, covered = 120, 0
    for k in range(trials):
        ci = bootstrap_ci(simulated_counts(rng, 60), object_recall, n_boot=300, seed=k)
        covered += ci.low <= TRUE_RECALL <= ci.high
    coverage = covered / trials
    assert 0.87 <= coverage <= 0.995, coverage  # nominal 0.95; 120 trials give about +-0.04


def test_paired_difference_excludes_zero_for_a_better_model() -> None:
    rng = np.random.default_rng(1)
    n_obj = rng.poisson(3, 200)
    tp_a = rng.binomial(n_obj, 0.4)
    tp_b = np.minimum(n_obj, tp_a + rng.binomial(n_obj - tp_a, 0.5))  # b finds what a finds, and more
    fp = rng.poisson(0.5, 200)
    a, b = (tp_a, fp, n_obj - tp_a), (tp_b, fp, n_obj - tp_b)
    diff = paired_bootstrap_diff(a, b, object_f1, n_boot=500, seed=0)
    assert diff.estimate > 0 and diff.low > 0


def test_aa_comparison_is_exactly_zero() -> None:
    rng = np.random.default_rng(2)
    tp, fn = simulated_counts(rng, 50)
    arrays = (tp, np.zeros_like(tp), fn)
    diff = paired_bootstrap_diff(arrays, arrays, object_f1, n_boot=200, seed=0)
    assert diff.estimate == diff.low == diff.high == 0.0
