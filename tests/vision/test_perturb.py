"""Robustness perturbations: deterministic, plausible, and honest about the training range."""

from __future__ import annotations

import numpy as np
import pytest

from vision.config import AugmentConfig, Range
from vision.perturb import PERTURBATIONS, SEVERITIES, perturb, within_training_range

GEOMETRIC = {"magnification", "shift"}


@pytest.fixture(scope="module")
def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = (0.4 + 0.05 * rng.standard_normal((4, 32, 32))).astype(np.float32)
    y = np.zeros((4, 32, 32), np.uint8)
    y[:, 3:7, 4:8] = 1  # off-centre, so magnification moves it
    x[y == 1] += 0.2
    return x, y


def test_at_least_six_perturbations_with_five_severities() -> None:
    assert len(PERTURBATIONS) >= 6 and SEVERITIES == (1, 2, 3, 4, 5)
    assert all(len(p.values) == 5 for p in PERTURBATIONS.values())


@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
def test_deterministic_and_changes_the_image(name: str, batch: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = batch
    a = perturb(name, 3, x, y, seed=5)
    b = perturb(name, 3, x, y, seed=5)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[0].dtype == np.float32 and a[1].dtype == np.uint8 and a[0].shape == x.shape
    assert 0.0 <= a[0].min() and a[0].max() <= 1.0
    assert not np.array_equal(a[0], x)
    if name in GEOMETRIC:
        assert not np.array_equal(a[1], y)  # the masks move with the image
    else:
        assert np.array_equal(a[1], y)


@pytest.mark.parametrize("name", sorted(set(PERTURBATIONS) - GEOMETRIC - {"gain_drift"}))
def test_severity_increases_the_change(name: str, batch: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = batch
    changes = [float(np.abs(perturb(name, s, x, y, seed=1)[0] - x).mean()) for s in SEVERITIES]
    assert changes[0] < changes[-1]


def test_within_training_range_follows_the_config() -> None:
    aug = AugmentConfig(blur_sigma=Range(low=0, high=1.0), gain=Range(low=0.85, high=1.1))
    blur, gain, band = PERTURBATIONS["detector_blur"], PERTURBATIONS["gain_drift"], PERTURBATIONS["banding"]
    assert [within_training_range(blur, v, aug) for v in blur.values] == [True, True, False, False, False]
    assert [within_training_range(gain, v, aug) for v in gain.values] == [True, True, True, False, False]
    assert not any(within_training_range(band, v, aug) for v in band.values)  # nothing trains banding
    assert not within_training_range(blur, 0.5, None)  # unknown training config: extrapolation
