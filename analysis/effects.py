"""Measure a predicted effect: one metric on one named slice, for one model's dev probabilities.

A recommendation predicts that a metric moves on a slice (``ExpectedEffect``: metric, slice,
direction, size). Scoring that prediction needs the same metric measured, on the same slice,
for the candidate and for the model it was meant to improve. Slice names are the ones the slice
analysis writes (``size<12.5``, ``size∈[12.5,30)``, ``background=texture``, two-way crossings
joined by `` & ``); :func:`parse_slice` turns such a name back into a predicate.

Metrics:

- ``miss_rate``: share of voids in the slice the model missed (defect units);
- ``one_minus_dice``: mean of 1 - dice over the slice's images (image units);
- ``dice``: mean image dice over the slice's images;
- any key of ``vision.metrics.aggregate`` (``object_f1``, ``pixel_iou`` ...) on slice ``all``.

:func:`measure` returns ``None`` for a metric or slice it cannot measure, never a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from analysis.report import Evaluated
from analysis.slices import Units
from analysis.units import defect_units, image_units
from segfactory.records import Direction, ExpectedEffect
from vision.metrics import aggregate, per_image_metrics

ALL = "all"
_NUMERIC = re.compile(r"^(?P<attr>\w+)(?P<op><|>=)(?P<value>[-+0-9.eE]+)$")
_INTERVAL = re.compile(r"^(?P<attr>\w+)∈\[(?P<low>[-+0-9.eE]+),(?P<high>[-+0-9.eE]+)\)$")
_CATEGORY = re.compile(r"^(?P<attr>\w+)=(?P<value>.+)$")
UnitPredicate = Callable[[Units], np.ndarray]


def _term(term: str) -> UnitPredicate | None:
    term = term.strip()
    if m := _NUMERIC.match(term):
        attr, value = m["attr"], float(m["value"])
        if m["op"] == "<":
            return lambda u: _num(u, attr) < value
        return lambda u: _num(u, attr) >= value
    if m := _INTERVAL.match(term):
        attr, low, high = m["attr"], float(m["low"]), float(m["high"])
        return lambda u: (_num(u, attr) >= low) & (_num(u, attr) < high)
    if m := _CATEGORY.match(term):
        name, category = m["attr"], m["value"].strip()
        return lambda u: np.array(
            [v is not None and str(v) == category for v in u.columns.get(name, [])], dtype=bool
        )
    return None


def _num(units: Units, attr: str) -> np.ndarray:
    if attr not in units.columns:
        return np.full(len(units), np.nan)
    with np.errstate(invalid="ignore"):
        return units.numeric(attr)


def parse_slice(name: str) -> UnitPredicate | None:
    """The predicate of a slice name from the slice analysis; None when a term is not understood."""
    if name == ALL:
        return lambda u: np.ones(len(u), dtype=bool)
    terms = [_term(t) for t in name.split("&")]
    if any(t is None for t in terms):
        return None

    def predicate(units: Units) -> np.ndarray:
        mask = np.ones(len(units), dtype=bool)
        for term in terms:
            assert term is not None
            with np.errstate(invalid="ignore"):
                mask &= term(units)
        return mask

    return predicate


@dataclass(frozen=True)
class Measured:
    """One metric on one slice: its value and how many units it rests on."""

    value: float
    n: int


def measure(effect: ExpectedEffect, evaluated: Evaluated, threshold: float) -> Measured | None:
    """``effect.metric`` on ``effect.slice`` for one model on one split; None if not measurable."""
    predicate = parse_slice(effect.slice)
    if predicate is None:
        return None
    split = evaluated.split
    errors = evaluated.errors(threshold)
    if effect.metric == "miss_rate":
        units = defect_units(split.image_meta, split.defects, errors.defect_outcome)
        return _mean(units.outcome, predicate(units))
    if effect.metric in ("one_minus_dice", "dice"):
        units = image_units(split.image_meta, split.defects, errors.per_image["dice"])
        got = _mean(units.outcome, predicate(units))
        if got is None or effect.metric == "one_minus_dice":
            return got
        return Measured(1.0 - got.value, got.n)
    if effect.slice == ALL:
        table = aggregate(per_image_metrics(evaluated.prob, split.masks, threshold=threshold))
        if effect.metric in table and math.isfinite(float(table[effect.metric])):
            return Measured(float(table[effect.metric]), int(split.masks.shape[0]))
    return None


def _mean(outcome: np.ndarray, mask: np.ndarray) -> Measured | None:
    n = int(mask.sum())
    return Measured(float(outcome[mask].mean()), n) if n else None


def signed_gain(effect: ExpectedEffect, change: float) -> float:
    """``change`` (candidate minus parent) in the predicted direction: positive = as predicted."""
    return -change if effect.direction is Direction.DOWN else change


__all__ = ["ALL", "Measured", "measure", "parse_slice", "signed_gain"]
