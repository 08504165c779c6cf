"""The top-up's report as typed records: what ``segfactory topup`` writes to ``people/<run>/topup.json``
and prints with ``--json``.

A record is dumped with ``exclude_unset``, so a key is in the JSON exactly when the top-up set
it (``synthetic_vs_augment`` only at a dose where both arms trained, ``plot`` once the plot is
written, ``round_two`` only with ``--round-two``): the file and ``--json`` keep the shape they
had as plain dicts.
"""

from __future__ import annotations

from pydantic import JsonValue

from segfactory.records import Result
from segfactory.stats import Interval


class SliceChange(Result):
    """New minus baseline dev miss rate over one slice's voids, paired, with its bootstrap interval."""

    estimate: float
    low: float
    high: float
    n: float  # voids in the slice


class RoundTwo(Result):
    """Round two: the weakest dev slice of the nothing-arm model, one fix ticket, its measured change.

    ``miss_rate_change`` is set only when the fix ticket trained (``exclude_unset`` keeps it out
    of the JSON otherwise).
    """

    slice: str
    slice_effect: float  # miss rate in the slice minus outside it (dev)
    slice_n: int
    confirmed: bool
    fix_kind: str
    change: dict[str, JsonValue]  # the fix ticket's config patch
    reason: str
    ticket: str
    status: str
    chosen_from: str
    result: str
    miss_rate_change: SliceChange | None = None


class ArmAtDose(Result):
    recall: Interval  # real-slice object recall of the arm at this dose
    vs_nothing: Interval  # paired against the nothing arm, over the real images


class DoseRow(Result):
    n: int
    synthetic: ArmAtDose | None
    augment: ArmAtDose | None
    synthetic_vs_augment: Interval | None = None


class TurningPoint(Result):
    best_n: int
    helping: list[int]
    hurting: list[int]
    stops_helping_after: int | None
    summary: str


class DoseResponse(Result):
    rows: list[DoseRow]
    turning_point: TurningPoint


class ArmTicket(Result):
    ticket: str
    arm: str
    n: int
    dataset: str
    status: str
    model: str | None


class RealDev(Result):
    n_images: int
    n_slice_voids: int
    stand_in: bool


class MilestoneNote(Result):
    tiers: str
    models: list[str]
    note: str


class TopupReport(Result):
    slice: str
    doses: list[int]
    seed: int
    epochs: int
    ticket_seconds: float
    budget_s: float | None
    base: str
    real_dev: RealDev
    measured_on: str
    tickets: list[ArmTicket]
    dose_response: DoseResponse
    milestone: MilestoneNote
    plot: str | None = None
    round_two: RoundTwo | None = None  # controls.rounds.run_round_two's result


__all__ = [
    "ArmAtDose",
    "ArmTicket",
    "DoseResponse",
    "DoseRow",
    "MilestoneNote",
    "RealDev",
    "RoundTwo",
    "SliceChange",
    "TopupReport",
    "TurningPoint",
]
