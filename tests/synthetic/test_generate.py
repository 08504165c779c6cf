"""The generator: physics sanity, exact masks, metadata, determinism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from segfactory.errors import UsageError
from synthetic import GeneratedSet, GenParams, generate, make_params
from synthetic._physics import GAUSS_MIN_COUNTS, Acquisition, expose, photon_counts
from synthetic._voids import Ellipse, contrast_of, depth_for_contrast, render_path
from synthetic.params import ParamValues
from synthetic.splits import DefectRow, ImageMeta, SplitManifest, image_sha256, read_split

QUIET: Acquisition = {
    "background": "flat",
    "dose": 1e6,
    "blur": 0.0,
    "gain": 1.0,
    "offset": 0.0,
    "scatter": 0.0,
    "read_noise": 0.0,
    "mu": 0.08,
    "beam_hardening": 0.01,
}


def test_intensity_falls_with_thickness() -> None:
    rng = np.random.default_rng(0)
    means = [float(expose(np.full((32, 32), t), QUIET, rng).mean()) for t in (0.0, 5.0, 10.0, 20.0, 40.0)]
    assert all(a > b for a, b in zip(means, means[1:], strict=False))


def test_contrast_rises_with_void_depth() -> None:
    params = GenParams()
    model = [contrast_of(d, 20.0, params) for d in (1.0, 4.0, 8.0, 12.0)]
    assert all(a < b for a, b in zip(model, model[1:], strict=False))
    measured = []
    rng = np.random.default_rng(1)
    for depth in (1.0, 4.0, 8.0, 12.0):
        rendered = render_path([Ellipse(16.0, 16.0, 6.0, 6.0, 0.0)], depth, 32)
        assert rendered is not None
        box, unit = rendered
        t_eff = np.full((32, 32), 20.0)
        t_eff[box[0] : box[2], box[1] : box[3]] -= unit
        image = expose(t_eff, QUIET, rng)
        measured.append(float(image[16, 16] - image[2, 2]))
    assert all(a < b for a, b in zip(measured, measured[1:], strict=False))


def test_depth_for_contrast_inverts_contrast_of() -> None:
    params = GenParams()
    for c in (0.05, 0.2, 0.35):
        assert contrast_of(depth_for_contrast(c, 25.0, params), 25.0, params) == pytest.approx(c, rel=1e-9)


@pytest.mark.parametrize(("a", "b", "angle"), [(9.3, 5.1, 0.4), (14.0, 14.0, 0.0), (3.2, 1.7, 1.1)])
def test_mask_is_exactly_the_pixel_centres_inside_the_ellipse(a: float, b: float, angle: float) -> None:
    e = Ellipse(20.3, 18.6, a, b, angle)
    rendered = render_path([e], 2.0, 40)
    assert rendered is not None
    (y0, x0, y1, x1), path = rendered
    mask = np.zeros((40, 40), bool)
    mask[y0:y1, x0:x1] = path > 0
    yy, xx = np.mgrid[0:40, 0:40]
    u = ((xx - e.cx) * math.cos(angle) + (yy - e.cy) * math.sin(angle)) / a
    v = (-(xx - e.cx) * math.sin(angle) + (yy - e.cy) * math.cos(angle)) / b
    assert np.array_equal(mask, u * u + v * v < 1)
    # and the pixel count approaches the analytic area (error bounded by the perimeter)
    assert abs(mask.sum() - math.pi * a * b) <= 2 * math.pi * max(a, b) * 0.5 + 2


def test_gaussian_approximation_matches_poisson_moments() -> None:
    rng = np.random.default_rng(2)
    for lam in (GAUSS_MIN_COUNTS, 200.0):
        counts = photon_counts(np.full(400_000, lam), rng)
        reference = rng.poisson(lam, 400_000)
        assert counts.mean() == pytest.approx(reference.mean(), rel=0.005)
        assert counts.var() == pytest.approx(reference.var(), rel=0.02)
    low = photon_counts(np.full(1000, GAUSS_MIN_COUNTS / 3), rng)
    assert np.array_equal(low, np.round(low))  # Poisson below the threshold


@pytest.fixture(scope="module")
def small_set() -> GeneratedSet:
    return generate(64, 48, seed=11, workers=1)


def test_metadata_agrees_with_arrays(small_set: GeneratedSet) -> None:
    s = small_set
    assert s.images.dtype == np.float32 and s.masks.dtype == np.uint8
    assert 0.0 <= s.images.min() and s.images.max() <= 1.0
    assert set(np.unique(s.masks)) <= {0, 1}
    assert [m["id"] for m in s.image_meta] == list(range(64))
    per_image_area = np.zeros(64, int)
    for d in s.defects:
        y0, x0, y1, x1 = d["bbox"]
        assert d["area"] == int(s.masks[d["image_id"], y0:y1, x0:x1].sum()) and d["area"] > 0
        assert d["edge"] == (y0 == 0 or x0 == 0 or y1 == 48 or x1 == 48)
        assert 0.0 < d["contrast"] < 1.0 and d["depth"] < d["thickness"]
        per_image_area[d["image_id"]] += d["area"]
    assert np.array_equal(per_image_area, s.masks.reshape(64, -1).sum(axis=1))
    for i, meta in enumerate(s.image_meta):
        assert meta["sha256"] == image_sha256(s.images[i])
        assert meta["n_defects"] == sum(1 for d in s.defects if d["image_id"] == i)
    assert {d["shape"] for d in s.defects} == {"pore", "shrinkage", "cluster"}


def test_row_types_name_what_the_generator_writes(small_set: GeneratedSet, tmp_path: Path) -> None:
    """The typed shapes of rows, manifest and parameters keep up with what is written."""
    assert {k for m in small_set.image_meta for k in m} <= ImageMeta.__annotations__.keys()
    assert {k for d in small_set.defects for k in d} == DefectRow.__annotations__.keys()
    assert Acquisition.__annotations__.keys() <= ImageMeta.__annotations__.keys()
    written = read_split(small_set.write(tmp_path / "set", parent="p"))
    assert written.manifest.keys() <= SplitManifest.__annotations__.keys()
    assert ParamValues.__annotations__.keys() == GenParams.model_fields.keys()


def test_same_seed_same_arrays_different_seed_different(small_set: GeneratedSet) -> None:
    again = generate(64, 48, seed=11, workers=1)
    assert [m["sha256"] for m in again.image_meta] == [m["sha256"] for m in small_set.image_meta]
    assert np.array_equal(again.masks, small_set.masks)
    other = generate(64, 48, seed=12, workers=1)
    assert not set(m["sha256"] for m in other.image_meta) & set(m["sha256"] for m in small_set.image_meta)


def test_worker_count_does_not_change_the_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import synthetic._generate as gen

    monkeypatch.setattr(gen, "PARALLEL_MIN_IMAGES", 1)
    monkeypatch.setattr(gen, "CHUNK_IMAGES", 16)
    one = generate(80, 24, seed=5, workers=1)
    two = generate(80, 24, seed=5, workers=2)
    assert np.array_equal(one.images, two.images) and one.defects == two.defects


def test_parameters_steer_the_draw() -> None:
    none = generate(20, 32, seed=1, params=make_params(void_prob=0.0), workers=1)
    assert none.masks.sum() == 0 and not none.defects
    only_flat = generate(20, 32, seed=1, params=make_params(backgrounds=("flat",)), workers=1)
    assert {m["background"] for m in only_flat.image_meta} == {"flat"}


@pytest.mark.parametrize(
    "values",
    [
        {"contrast_max": 1.5},
        {"contrast_min": 0.5, "contrast_max": 0.2},
        {"part_source": "lego"},
        {"backgrounds": ("plaid",)},
        {"part_source": "fashion-mnist"},
    ],
)
def test_bad_parameters_are_usage_errors(values: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        make_params(**values)


@pytest.mark.parametrize(("n", "size"), [(0, 32), (-3, 32), (5, -8), (5, 4)])
def test_bad_sizes_are_usage_errors(n: int, size: int) -> None:
    with pytest.raises(UsageError):
        generate(n, size, seed=0)


def test_fast_and_reference_engines_draw_the_same_scene() -> None:
    fast = generate(40, 48, seed=9, workers=1, engine="fast")
    reference = generate(40, 48, seed=9, workers=1, engine="numpy")
    assert np.array_equal(fast.masks, reference.masks) and fast.defects == reference.defects
    assert (
        abs(float(fast.images.mean()) - float(reference.images.mean())) < 0.01
    )  # noise differs, not the scene


def test_fast_exposure_matches_reference_without_noise_and_in_moments() -> None:
    from synthetic._physics import expose_fast, expose_numpy

    rng = np.random.default_rng(3)
    t_eff = rng.uniform(0, 30, (40, 40))
    field = np.ones((40, 40))
    acq: Acquisition = {
        **QUIET,
        "dose": 800.0,
        "blur": 0.9,
        "read_noise": 4.0,
        "scatter": 0.02,
        "offset": 0.01,
    }
    assert np.allclose(
        expose_fast(t_eff, field, acq, rng, noise=False),
        expose_numpy(t_eff, field, acq, rng, noise=False),
        atol=1e-5,
    )
    flat = np.full((400, 400), 12.0)
    fast = expose_fast(flat, np.ones_like(flat), acq, rng)
    reference = expose_numpy(flat, np.ones_like(flat), acq, rng)
    assert fast.mean() == pytest.approx(reference.mean(), rel=2e-3)
    assert fast.std() == pytest.approx(reference.std(), rel=0.03)


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(UsageError, match="engine"):
        generate(2, 32, 0, engine="gpu")  # type: ignore[arg-type]
