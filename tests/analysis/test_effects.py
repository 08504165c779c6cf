"""Measuring a predicted effect (metric on a named slice) for one model's dev probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.effects import measure, parse_slice
from analysis.report import Evaluated
from analysis.units import defect_units
from segfactory.records import Direction, ExpectedEffect
from synthetic import generate


@pytest.fixture(scope="module")
def split():  # type: ignore[no-untyped-def]
    return generate(40, 48, 3)


def _effect(metric: str, slice_name: str = "all") -> ExpectedEffect:
    return ExpectedEffect(metric=metric, slice=slice_name, direction=Direction.DOWN, size=0.1)


def test_slice_names_of_the_analysis_parse_back_into_their_units(split) -> None:  # type: ignore[no-untyped-def]
    from analysis.errortypes import ErrorType

    units = defect_units(split.image_meta, split.defects, [ErrorType.MISSED.value] * len(split.defects))
    area = units.numeric("size")
    cut = float(np.median(area))
    assert parse_slice(f"size<{cut:.3g}")(units).sum() == (area < float(f"{cut:.3g}")).sum()  # type: ignore[misc]
    both = parse_slice(f"size>={cut:.3g} & size<1e9")
    assert both is not None and both(units).sum() == (area >= float(f"{cut:.3g}")).sum()
    interval = parse_slice("size∈[2,30)")
    assert interval is not None and interval(units).sum() == ((area >= 2) & (area < 30)).sum()
    shapes = {str(s) for s in units.columns["shape"]}
    one = sorted(shapes)[0]
    assert parse_slice(f"shape={one}")(units).sum() == sum(str(s) == one for s in units.columns["shape"])  # type: ignore[misc]
    assert parse_slice("what is this") is None


def test_miss_rate_and_dice_follow_the_model(split) -> None:  # type: ignore[no-untyped-def]
    perfect = Evaluated(split, split.masks.astype(np.float32))
    blind = Evaluated(split, np.zeros(split.masks.shape, dtype=np.float32))
    assert measure(_effect("miss_rate"), perfect, 0.5).value == 0.0  # type: ignore[union-attr]
    assert measure(_effect("miss_rate"), blind, 0.5).value == 1.0  # type: ignore[union-attr]
    assert measure(_effect("one_minus_dice"), blind, 0.5).value > 0.5  # type: ignore[union-attr]
    assert measure(_effect("dice"), perfect, 0.5).value > 0.9  # type: ignore[union-attr]
    assert measure(_effect("object_f1"), perfect, 0.5).value == pytest.approx(1.0)  # type: ignore[union-attr]
    assert measure(_effect("object_f1", "size<3"), perfect, 0.5) is None  # no per-slice object F1
    assert measure(_effect("miss_rate", "background=nowhere"), perfect, 0.5) is None  # an empty slice
