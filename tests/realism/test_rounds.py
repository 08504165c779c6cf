"""Round two: the next weakest dev slice, a different kind of fix, the paired slice change, the record."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from analysis.slices import SliceRow
from controls.rounds import (
    RoundRecord,
    pick_next,
    read_rounds,
    record_round,
    result_text,
    round_ticket,
    slice_change,
)
from segfactory.errors import DataError
from segfactory.records import Direction, ExpectedEffect, Recommendation, TicketKind
from synthetic import generate


def _row(name: str, effect: float, n: int = 40, confirmed: bool = False, unit: str = "defect") -> SliceRow:
    return SliceRow(
        name=name,
        unit=unit,
        attributes=[name.split("<")[0]],
        n=n,
        score=0.5 + effect,
        low=0.0,
        high=1.0,
        complement=0.5,
        effect=effect,
        discovery_n=n // 2,
        discovery_effect=effect,
        p_value=0.01,
        q_value=0.02,
        discovered=True,
        confirmed=confirmed,
    )


def _rec(action: str, kind: TicketKind) -> Recommendation:
    return Recommendation(
        id=action,
        evidence={},
        action=action,
        kind=kind,
        predicted_effect=ExpectedEffect(metric="dice", direction=Direction.UP, size=0.01),
    )


def _report(slices: list[SliceRow], recs: list[Recommendation] | None = None) -> Any:
    return SimpleNamespace(slices=slices, recommendations=recs or [])


def test_picks_the_weakest_untried_slice_preferring_confirmed_ones() -> None:
    report = _report(
        [
            _row("size<9", 0.30),
            _row("contrast<0.1", 0.10, confirmed=True),
            _row("dose<500", 0.5, n=5),
            _row("background=flat", 0.6, unit="image"),
            _row("shape=round", -0.2),
        ]
    )
    assert pick_next(report, []).slice == "contrast<0.1"  # confirmed beats a larger unconfirmed effect
    done = [RoundRecord(weakness="w", fix_kind="training", fix="{}", result="r", slice="contrast<0.1")]
    nxt = pick_next(report, done)
    assert nxt.slice == "size<9"  # dose<500 is below the minimum support; image slices are skipped
    assert nxt.fix_kind == "model"  # a different kind from the round that was tried
    with pytest.raises(DataError, match="no untried defect slice"):
        pick_next(
            _report([_row("size<9", 0.3)]),
            [RoundRecord(weakness="w", fix_kind="t", fix="", result="", slice="size<9")],
        )


def test_the_analysis_recommendation_chooses_the_kind_and_curation_is_left_to_people() -> None:
    report = _report(
        [_row("size<9", 0.3)],
        [_rec("label_fix", TicketKind.CURATION), _rec("model_change", TicketKind.CONFIG)],
    )
    nxt = pick_next(report, [RoundRecord(weakness="thin", fix_kind="targeted_synthetic", fix="", result="")])
    assert (
        nxt.fix_kind == "model" and "recommended by the dev analysis" in nxt.reason and "curate" in nxt.reason
    )
    tried = [RoundRecord(weakness="a", fix_kind=k, fix="", result="") for k in ("training", "model")]
    with pytest.raises(DataError, match="was tried already"):
        pick_next(report, tried)
    ticket = round_ticket("r-round2-model", nxt, 60, 2, 3)
    assert ticket.kind == TicketKind.CONFIG and ticket.change == {"model": {"decoder_width": 32}}
    assert ticket.budget.device_seconds == 60 and ticket.seed == 3


def test_slice_change_is_paired_and_signed() -> None:
    from analysis.slices import one_way_slices
    from analysis.units import defect_units

    dev = generate(40, 32, 5, workers=1)
    perfect = dev.masks.astype(np.float32)
    blind = np.zeros_like(perfect)
    units = defect_units(dev.image_meta, dev.defects, ["missed"] * len(dev.defects))
    name = one_way_slices(units, [])[0].name
    worse = slice_change(dev, perfect, blind, name, 0.5, seed=0)
    assert worse.estimate == pytest.approx(1.0) and worse.n >= 1  # every void of the slice now missed
    assert "hurt" in result_text(worse)
    assert slice_change(dev, blind, perfect, name, 0.5, seed=0).estimate == pytest.approx(-1.0)
    same = slice_change(dev, perfect, perfect, name, 0.5, seed=0)
    assert same.estimate == 0.0 and "did nothing" in result_text(same)


def test_rounds_are_appended_and_read_back(tmp_path: Path) -> None:
    for result in ("helped", "no change"):
        record_round(tmp_path, RoundRecord(weakness="w", fix_kind="training", fix="{}", result=result))
    assert [r.result for r in read_rounds(tmp_path)] == ["helped", "no change"]
    assert read_rounds(tmp_path / "none") == []
