"""Slice constraints: the generator draws the slice it is asked for, or says why it cannot."""

from __future__ import annotations

import pytest

from segfactory.errors import UsageError
from synthetic import generate, make_params
from synthetic.params import GenParams
from synthetic.slices import LOW_CONTRAST_MAX, THIN_MAX_DIAMETER_PX, constrain, in_slice


def test_low_contrast_voids_are_drawn_below_the_ceiling() -> None:
    params = constrain(GenParams(), "low-contrast")
    drawn = generate(24, 32, 5, params, workers=1)
    assert drawn.defects and all(d["contrast"] <= LOW_CONTRAST_MAX + 1e-9 for d in drawn.defects)
    assert all(in_slice("low-contrast", d) for d in drawn.defects)


def test_thin_and_background_combine() -> None:
    params = constrain(GenParams(), "thin+background:flat")
    assert params.diameter_max <= THIN_MAX_DIAMETER_PX and params.backgrounds == ("flat",)
    drawn = generate(16, 32, 6, params, workers=1)
    assert {m["background"] for m in drawn.image_meta} == {"flat"}
    assert sum(in_slice("thin", d) for d in drawn.defects) == len(drawn.defects)


@pytest.mark.parametrize(
    ("base", "slice_name", "message"),
    [
        ({}, "background:marble", "no background 'marble'"),
        ({}, "wide", "unknown slice constraint 'wide'"),
        ({"contrast_min": 0.2}, "low-contrast", "base contrast_min is 0.2"),
        ({"diameter_min": 6.0}, "thin", "base diameter_min is 6.0"),
    ],
)
def test_a_constraint_the_generator_cannot_meet_is_a_clear_error(
    base: dict[str, float], slice_name: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        constrain(make_params(**base), slice_name)


def test_in_slice_reads_measured_values_not_targets() -> None:
    assert in_slice("low-contrast", {"contrast": 0.05, "diameter": 9})
    assert not in_slice("low-contrast", {"contrast": None, "diameter": 9})  # unmeasured: not in the slice
    assert not in_slice("tiny", {"contrast": 0.05, "diameter": 9})
    assert in_slice("background:flat", {"diameter": 2}, {"id": 0})  # real images name no background
    assert not in_slice("background:flat", {"diameter": 2}, {"background": "texture"})
