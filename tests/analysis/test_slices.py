"""Slice discovery, Benjamini–Hochberg, minimum support and confirmation on the other half."""

from __future__ import annotations

import numpy as np

from analysis.slices import MIN_SUPPORT, Units, find_slices, halves


def _units(n_images: int, seed: int, rate: object) -> Units:
    """Two defects per image; ``rate(contrast, image) -> P(missed)``."""
    rng = np.random.default_rng(seed)
    image = np.repeat(np.arange(n_images), 2)
    contrast = rng.uniform(0, 1, image.size)
    background = rng.choice(["flat", "texture", "gradient"], image.size)
    p = np.array([rate(c, i) for c, i in zip(contrast, image, strict=True)])  # type: ignore[operator]
    outcome = (rng.random(image.size) < p).astype(float)
    cols = {"contrast": contrast.astype(object), "background": background.astype(object)}
    return Units("defect", cols, outcome, image)


def test_a_real_weak_slice_is_found_and_confirmed() -> None:
    units = _units(400, 0, lambda c, i: 0.7 if c < 0.25 else 0.1)
    report = find_slices(units, seed=1)
    assert report.findings, report.rows[:3]
    top = report.findings[0]
    assert top.attributes[0] == "contrast" and top.name.startswith("contrast<")
    assert top.low <= top.score <= top.high and top.n >= MIN_SUPPORT
    assert top.confirm_n > 0 and top.confirm_p < 0.05


def test_a_chance_slice_on_one_half_is_not_reported() -> None:
    base = _units(400, 2, lambda c, i: 0.1)
    disc = halves(base, seed=5)
    rng = np.random.default_rng(3)
    outcome = base.outcome.copy()
    low = np.array([float(c) < 0.25 for c in base.columns["contrast"]])
    outcome[disc & low] = (rng.random(int((disc & low).sum())) < 0.7).astype(
        float
    )  # only on the discovery half
    units = Units("defect", base.columns, outcome, base.image)
    report = find_slices(units, seed=5)
    discovered = [r for r in report.rows if r.discovered and r.name.startswith("contrast<")]
    assert discovered, "the discovery half must see the slice"
    assert not any(r.confirmed for r in discovered)
    assert not any(r.name.startswith("contrast<") for r in report.findings)


def test_pure_noise_yields_no_findings() -> None:
    for seed in range(3):
        assert find_slices(_units(300, 10 + seed, lambda c, i: 0.2), seed=seed).findings == []


def test_slices_below_minimum_support_are_not_tested() -> None:
    units = _units(20, 4, lambda c, i: 0.9 if c < 0.25 else 0.0)  # 40 units: halves hold 20 < MIN_SUPPORT
    report = find_slices(units, seed=0)
    assert report.n_tested == 0 and report.rows == [] and report.findings == []
    assert any("minimum support" in note for note in report.notes)


def test_missing_and_empty_inputs_are_stated_not_crashed() -> None:
    units = _units(200, 5, lambda c, i: 0.2)
    units.columns["dose"] = np.array([None] * len(units), dtype=object)
    report = find_slices(units, seed=0)
    assert any("'dose' is missing" in note for note in report.notes)
    empty = Units("image", {"dose": np.array([], dtype=object)}, np.zeros(0), np.zeros(0, int))
    assert find_slices(empty).notes == ["no image units; no slices"]


def test_a_fresh_set_can_confirm_instead_of_the_other_half() -> None:
    weak = lambda c, i: 0.7 if c < 0.25 else 0.1  # noqa: E731
    units, fresh = _units(200, 6, weak), _units(200, 7, weak)
    report = find_slices(units, seed=0, confirm=fresh)
    assert report.findings and report.findings[0].discovery_n == report.findings[0].n
    flat = _units(200, 8, lambda c, i: 0.1)
    assert not any(r.name.startswith("contrast<") for r in find_slices(units, seed=0, confirm=flat).findings)


def test_train_coverage_says_which_slices_training_lacks_and_stays_unmeasured_without_metadata() -> None:
    weak = lambda c, i: 0.7 if c < 0.25 else 0.1  # noqa: E731
    units = _units(400, 9, weak)
    train = _units(400, 10, lambda c, i: 0.0)
    train.columns["contrast"] = np.array(
        [0.3 + 0.7 * float(c) for c in train.columns["contrast"]], dtype=object
    )
    rows = {r.name: r for r in find_slices(units, seed=0, train=train).rows}
    low = next(r for name, r in rows.items() if name.startswith("contrast<") and "&" not in name)
    assert low.train_coverage == 0.0  # no training defect is as faint as the slice
    flat = next(r for name, r in rows.items() if name.startswith("background=") and "&" not in name)
    assert flat.train_coverage is not None and 0.7 < flat.train_coverage < 1.3  # drawn alike
    train.columns["contrast"] = np.array([None] * len(train), dtype=object)
    rows = {r.name: r for r in find_slices(units, seed=0, train=train).rows}
    assert rows[low.name].train_coverage is None  # not measured is not "absent from training"
    assert rows[flat.name].train_coverage is not None
    assert all(r.train_coverage is None for r in find_slices(units, seed=0).rows)
