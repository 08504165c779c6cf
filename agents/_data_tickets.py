"""Data tickets become real data: a ``targeted_synthetic`` change draws the requested slice.

The analysis names a slice in its own terms (``contrast<0.124``, ``background=texture``,
``diameter<3``); the generator takes constraints (``low-contrast``, ``background:texture``,
``tiny``, ``thin``). :func:`generator_constraint` translates one to the other and refuses a
slice the generator cannot target, so a data ticket never trains on unchanged data while
claiming otherwise. The topped-up train split is a new approved dataset version that names its
parent; dev is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agents._config_values import as_int
from segfactory.errors import UsageError
from segfactory.records import Ticket, TicketKind
from synthetic.extend import base_params, build_arm
from synthetic.slices import constrain, generator_constraint
from synthetic.splits import read_split

DEFAULT_TOPUP_IMAGES = 250  # images added when a data ticket does not say how many
MAX_TOPUP_IMAGES = 2000  # past this the ticket is refused: it would dwarf the train split


def topup_spec(ticket: Ticket) -> dict[str, JsonValue] | None:
    """The ``synthetic`` part of a data ticket's change, or None for any other ticket."""
    if ticket.kind is not TicketKind.DATA:
        return None
    spec = ticket.change.get("synthetic")
    return spec if isinstance(spec, dict) and spec.get("slice") else None


def materialise(home_root: Path, base: Any, ticket: Ticket, work: Path, keep: int | None = None) -> Any:
    """Build the dataset version a targeted-synthetic data ticket trains on: the base train images
    the parent trained on (its first ``keep``; all when None) + n slice images."""

    spec = topup_spec(ticket)
    if spec is None:
        return base
    n = as_int(spec.get("n", DEFAULT_TOPUP_IMAGES))
    if not 0 < n <= MAX_TOPUP_IMAGES:
        raise UsageError(f"a data ticket may add 1..{MAX_TOPUP_IMAGES} images; got {n}")
    constraint = generator_constraint(str(spec["slice"]))
    params = constrain(base_params(read_split(base.train, mmap=True).manifest), constraint)
    work.mkdir(parents=True, exist_ok=True)
    return build_arm(home_root, base, "synthetic", n, params, constraint, ticket.seed, work, keep)
