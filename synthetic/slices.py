"""Slice constraints for the generator: draw more of one weak slice.

A recommendation ``targeted_synthetic`` names a slice (``change.synthetic.slice``); a slice
constraint turns that name into generator parameters that draw voids of that slice only:

- ``thin``: small, elongated voids (shrinkage-heavy, diameter <= ``THIN_MAX_DIAMETER_PX``);
- ``low-contrast``: target contrast at most ``LOW_CONTRAST_MAX``;
- ``tiny``: pores below ``TINY_MAX_DIAMETER_PX``;
- ``background:<name>``: one named background type (see ``synthetic.params.BACKGROUNDS``).

Constraints combine with ``+`` (``thin+low-contrast``). A constraint the generator cannot meet
(an unknown name or background, or base parameters that leave no room, e.g. a base
``contrast_min`` above the low-contrast ceiling) raises UsageError saying why.
"""

from __future__ import annotations

import re
from typing import Any

from segfactory.errors import UsageError
from synthetic.params import BACKGROUNDS, GenParams, ParamValues, make_params
from synthetic.splits import ImageMeta

THIN_MAX_DIAMETER_PX = 4.0  # thin voids: equal-area diameter at most this many pixels
TINY_MAX_DIAMETER_PX = 3.0  # tiny pores: diameter at most this many pixels
LOW_CONTRAST_MAX = 0.12  # low contrast: Michelson contrast at most this
SLICE_NAMES = ("thin", "low-contrast", "tiny", "background:<name>")


def _thin(p: GenParams) -> ParamValues:
    if p.diameter_min > THIN_MAX_DIAMETER_PX:
        raise UsageError(
            f"slice 'thin' needs diameters <= {THIN_MAX_DIAMETER_PX} px but the base diameter_min "
            f"is {p.diameter_min}; lower diameter_min or pick another slice"
        )
    return {
        "diameter_max": min(p.diameter_max, THIN_MAX_DIAMETER_PX),
        "shrinkage_prob": 0.8,
        "cluster_prob": 0.0,
        "void_prob": 1.0,
    }


def _tiny(p: GenParams) -> ParamValues:
    """Pores of at most TINY_MAX_DIAMETER_PX. A base whose pores all start above that (a set
    that lacks the tiny ones, which is what a top-up for them is for) gets the generator's own
    lower bound instead, so the slice is drawn rather than refused."""
    low = p.diameter_min if p.diameter_min <= TINY_MAX_DIAMETER_PX else GenParams().diameter_min
    return {
        "diameter_min": low,
        "diameter_max": min(p.diameter_max, TINY_MAX_DIAMETER_PX),
        "shrinkage_prob": 0.0,
        "cluster_prob": 0.0,
        "void_prob": 1.0,
    }


def _low_contrast(p: GenParams) -> ParamValues:
    if p.contrast_min > LOW_CONTRAST_MAX:
        raise UsageError(
            f"slice 'low-contrast' needs contrast <= {LOW_CONTRAST_MAX} but the base contrast_min "
            f"is {p.contrast_min}; lower contrast_min or pick another slice"
        )
    return {"contrast_max": min(p.contrast_max, LOW_CONTRAST_MAX), "void_prob": 1.0}


def _background(p: GenParams, name: str) -> ParamValues:
    if name not in BACKGROUNDS:
        raise UsageError(
            f"slice 'background:{name}': the generator has no background {name!r}; "
            f"known: {', '.join(BACKGROUNDS)}"
        )
    return {"backgrounds": (name,)}


_SMALL = re.compile(r"^(diameter|area|size)\s*<")


def _term(term: str) -> str:
    """One analysis slice term as a generator constraint; UsageError when there is none."""
    term = term.strip()
    if term.startswith("contrast<"):
        return "low-contrast"
    if term.startswith("background="):
        return "background:" + term.split("=", 1)[1].strip()
    if _SMALL.match(term):
        return "tiny"
    if term.startswith("shape=shrinkage"):
        return "thin"
    raise UsageError(
        f"the generator cannot target the slice term {term!r}; it can target contrast<x, "
        "background=NAME, diameter<x (tiny) and shape=shrinkage (thin)"
    )


def generator_constraint(slice_name: str) -> str:
    """An analysis slice in the generator's terms: ``contrast<0.124 & background=texture`` ->
    ``low-contrast+background:texture``; UsageError naming the first term it cannot draw."""
    return "+".join(dict.fromkeys(_term(t) for t in slice_name.split("&")))


def can_draw(slice_name: str) -> bool:
    """Whether the generator can draw more images of this analysis slice (every term targetable)."""
    try:
        generator_constraint(slice_name)
    except UsageError:
        return False
    return True


def constrain(params: GenParams, slice_name: str) -> GenParams:
    """``params`` restricted to ``slice_name``; UsageError when the generator cannot meet it."""
    values = params.model_dump()
    for part in [s.strip() for s in slice_name.split("+")]:
        current = make_params(**values)
        if part == "thin":
            values.update(_thin(current))
        elif part == "tiny":
            values.update(_tiny(current))
        elif part == "low-contrast":
            values.update(_low_contrast(current))
        elif part.startswith("background:"):
            values.update(_background(current, part.split(":", 1)[1]))
        else:
            raise UsageError(
                f"unknown slice constraint {part!r}; known: {', '.join(SLICE_NAMES)} (join with '+')"
            )
    return make_params(**values)


def in_slice(slice_name: str, defect: dict[str, Any], image_meta: ImageMeta | None = None) -> bool:
    """Whether one ``defects.jsonl`` row belongs to the slice (measured, not generator targets).

    A background constraint needs the image's ``background`` field; real images lack it, so on
    them the background part is ignored (every void counts) and the report says so.
    """
    for part in [s.strip() for s in slice_name.split("+")]:
        diameter = float(defect.get("diameter") or 0.0)
        contrast = defect.get("contrast")
        if part == "thin" and not (diameter <= THIN_MAX_DIAMETER_PX or defect.get("shape") == "shrinkage"):
            return False
        if part == "tiny" and diameter > TINY_MAX_DIAMETER_PX:
            return False
        if part == "low-contrast" and (contrast is None or float(contrast) > LOW_CONTRAST_MAX):
            return False
        if (
            part.startswith("background:")
            and image_meta
            and "background" in image_meta
            and image_meta["background"] != part.split(":", 1)[1]
        ):
            return False
    return True
