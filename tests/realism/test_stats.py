"""Realism statistics on sets whose answer is known: planted contrast, white noise, same vs shifted."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.realism import c2st, mmd_test, set_stats
from analysis.realism._stats import EDGE_PX, NPS_BINS


def _discs(n: int, size: int, seed: int, contrast_step: float, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Flat 0.5 images with one 5x5 square void brighter by ``contrast_step`` and white noise."""
    rng = np.random.default_rng(seed)
    images = np.full((n, size, size), 0.5, dtype=np.float32)
    masks = np.zeros((n, size, size), dtype=np.uint8)
    for i in range(n):
        y, x = rng.integers(6, size - 11, 2)
        masks[i, y : y + 5, x : x + 5] = 1
        images[i, y : y + 5, x : x + 5] += contrast_step
    images += rng.normal(0, noise, images.shape).astype(np.float32)
    return np.clip(images, 0, 1), masks


def test_planted_contrast_area_and_edge_profile_are_measured() -> None:
    images, masks = _discs(40, 32, 0, 0.1, 0.0)
    stats = set_stats(images, masks)
    assert np.allclose(stats.void_area, 25)
    assert np.allclose(stats.void_contrast, 0.1 / 1.1, atol=1e-6)  # (0.6 - 0.5) / (0.6 + 0.5)
    profile = stats.edge_profile[2]  # 25 px is the medium size bin
    assert profile[EDGE_PX] == pytest.approx(0.2) and profile[EDGE_PX + 1] == pytest.approx(0.0, abs=1e-6)
    assert stats.nps.shape == (NPS_BINS,) and stats.features.shape == (40, 8)


def test_noise_power_rises_with_noise_and_is_flat_at_high_frequency_for_white_noise() -> None:
    quiet = set_stats(*_discs(30, 32, 1, 0.1, 0.01))
    loud = set_stats(*_discs(30, 32, 1, 0.1, 0.04))
    ratio = loud.nps[-3:] / quiet.nps[-3:]  # the planted squares add a little power at lower frequencies
    assert np.all(ratio > 11) and np.all(ratio < 20)  # power scales with sigma^2 = 16
    assert loud.nps[-4:].max() / loud.nps[-4:].min() < 1.5


def test_mmd_p_value_separates_same_from_shifted() -> None:
    a, b = set_stats(*_discs(120, 32, 2, 0.1, 0.02)), set_stats(*_discs(120, 32, 3, 0.1, 0.02))
    c = set_stats(*_discs(120, 32, 4, 0.1, 0.05))
    same, shifted = mmd_test(a.features, b.features, seed=1), mmd_test(a.features, c.features, seed=1)
    assert same.p_value > 0.05 and shifted.p_value < 0.01 and shifted.mmd2 > same.mmd2


@pytest.mark.slow  # a small CNN trains: ~5-20 s on a shared 2-core CPU
def test_classifier_tells_noisy_from_clean_and_reports_training_time() -> None:
    clean, _ = _discs(150, 32, 5, 0.1, 0.005)
    noisy, _ = _discs(150, 32, 6, 0.1, 0.08)
    out = c2st(clean, noisy, seed=0, steps=60)
    assert out.distinguishable and out.accuracy.low > 0.5 and out.train_seconds > 0
    assert out.n_held_out == 90 and out.accuracy.low <= out.accuracy.estimate <= out.accuracy.high


def test_the_report_keeps_its_json_shape() -> None:
    """``realism --json``'s keys, pinned (``realism_report`` adds stand_in, plot and report)."""
    from analysis.realism.report import compare

    syn, syn_masks = _discs(40, 32, 2, 0.1, 0.02)
    real, real_masks = _discs(40, 32, 3, 0.1, 0.03)
    out = compare(syn, syn_masks, real, real_masks, classifier=False)[0].as_json()
    assert set(out) == {
        "note",
        "n_synthetic",
        "n_real",
        "voids",
        "slices",
        "noise_power_spectrum",
        "mmd",
        "statistics_seconds",
        "classifier",
    }
    assert out["classifier"] is None and set(out["voids"]) == {
        "n_synthetic",
        "n_real",
        "area_ks",
        "contrast_ks",
    }
    assert set(out["slices"][0]) == {
        "slice",
        "n_synthetic",
        "n_real",
        "share_synthetic",
        "share_real",
        "median_area",
        "median_contrast",
        "contrast_ks",
        "edge_profile",
    }
    assert set(out["slices"][0]["edge_profile"]) == {"distance_px", "synthetic", "real", "mean_abs_gap"}
