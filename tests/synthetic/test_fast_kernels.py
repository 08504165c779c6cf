"""The fast engine's compiled kernels against their numpy references (synthetic._kernels)."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic import GenParams
from synthetic._kernels import NORMAL_TABLE_BITS, normal_table
from synthetic._parts import sample_spec, thickness_fast, thickness_numpy
from synthetic._physics import FULL_SCALE, GAUSS_MIN_COUNTS, Acquisition, expose_fast

QUIET: Acquisition = {
    "background": "flat",
    "dose": 1000.0,
    "blur": 0.0,
    "gain": 1.0,
    "offset": 0.0,
    "scatter": 0.0,
    "read_noise": 0.0,
    "mu": 0.08,
    "beam_hardening": 0.0,
}


@pytest.mark.parametrize("size", [33, 96])
def test_compiled_part_maps_are_bit_identical_to_numpy(size: int) -> None:
    params = GenParams()
    specs = [sample_spec(size, params, np.random.default_rng(i)) for i in range(60)]
    assert {s.kind for s in specs} == {0, 1} and any(len(s.ribs) for s in specs)
    for spec in specs:
        fast, fast_level = thickness_fast(spec, size)
        reference, level = thickness_numpy(spec, size)
        assert fast.dtype == reference.dtype == np.float64
        assert np.array_equal(fast, reference) and np.array_equal(fast_level, level)


def test_normal_table_is_a_symmetric_standard_normal_quantile_table() -> None:
    table = normal_table().astype(np.float64)
    cells = 1 << NORMAL_TABLE_BITS
    assert table.shape == (cells + 1,) and np.all(np.diff(table) > 0)
    assert np.allclose(table, -table[::-1], atol=1e-6) and table[cells // 2] == 0.0
    assert table[round(0.8413447 * cells)] == pytest.approx(1.0, abs=1e-4)  # Phi(1)
    assert 4.3 < table[-1] < 4.5


def _photon_counts(image: np.ndarray, acq: Acquisition) -> np.ndarray:
    """Undo the normalisation: the photon counts behind a reading (gain 1, no offset, no read noise)."""
    return image.astype(np.float64) * FULL_SCALE * acq["dose"]


@pytest.mark.parametrize("lam", [GAUSS_MIN_COUNTS / 3, 400.0])
def test_fast_exposure_has_poisson_moments_on_both_sides_of_the_threshold(lam: float) -> None:
    rng = np.random.default_rng(4)
    t_eff = np.full((500, 500), -np.log(lam / QUIET["dose"]) / QUIET["mu"])  # lam counts behind the wall
    counts = _photon_counts(expose_fast(t_eff, np.ones_like(t_eff), QUIET, rng), QUIET)
    reference = rng.poisson(lam, counts.size)
    assert counts.mean() == pytest.approx(reference.mean(), rel=0.005)
    assert counts.var() == pytest.approx(reference.var(), rel=0.02)
    integers = np.allclose(counts, np.round(counts), atol=1e-3)
    assert integers == (lam < GAUSS_MIN_COUNTS)  # Poisson draws below the threshold, Gaussian above


def test_fast_exposure_blur_matches_scipy_with_nearest_edges() -> None:
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(5)
    t_eff = rng.uniform(0.0, 30.0, (37, 29))
    acq: Acquisition = {**QUIET, "blur": 1.7, "scatter": 0.03}
    transmission = np.exp(-0.08 * t_eff) + 0.03
    expected = gaussian_filter(transmission, 1.7, mode="nearest", truncate=3.0) / FULL_SCALE
    got = expose_fast(t_eff, np.ones_like(t_eff), acq, rng, noise=False)
    assert np.allclose(got, expected, atol=2e-6)
