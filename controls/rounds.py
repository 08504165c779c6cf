"""Improvement rounds: weakness -> fix tried -> result, null results included.

Round one is a targeted synthetic top-up (``controls.topup``). Round two picks the next weakest
slice from **dev analysis only** (trust rule 9: the round-one model's ``AnalysisReport`` on the
dev split; never real-dev, a vault tier or a people-only report) and a *different kind* of fix,
a training or a model change, run as one config ticket with the round-one budget and seed. Its
result is the paired change of the slice's dev miss rate against the round-one baseline model
(the top-up's nothing arm), with a bootstrap interval, written whichever way it goes.

Curation is recorded as recommended when the analysis asks for it (``label_fix``) but is left to
``segfactory curate`` and a person: a curation plan changes labels, which this loop does not do
unattended. Rounds are appended to ``runs/<run>/people/rounds.jsonl`` (people only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, JsonValue

from analysis.report import Evaluated, analyse
from analysis.slices import one_way_slices, slice_masks, two_way_slices
from analysis.units import defect_units
from controls.executor import TicketExecutor
from controls.topup_report import RoundTwo, SliceChange, TopupReport
from runner import default_scorer
from segfactory.errors import DataError
from segfactory.home import Home
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from segfactory.stats import bootstrap_mean_ci
from synthetic.splits import read_split
from synthetic.versions import resolve

MIN_SLICE_VOIDS = 20  # voids in a dev slice; smaller slices are never picked (the win rule's min_support)
N_BOOT = 1000  # bootstrap resamples of the slice's miss-rate change
FIXES: dict[str, dict[str, JsonValue]] = {  # fix kind -> the config patch its ticket carries
    "training": {"sampling": {"rare_oversample": 2.0}},  # weight images holding a small void twice
    "model": {"model": {"decoder_width": 32}},  # a wider full-resolution decoder
}
RECOMMENDED_KIND = {"model_change": "model"}  # analysis action -> the fix kind it asks for
RUN_ORDER = ("training", "model")  # fix kinds tried when the analysis asks for none (or for curation)


class RoundRecord(BaseModel):
    """One improvement round for people: weakness -> fix tried -> result (null results included)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    weakness: str
    fix_kind: str  # targeted_synthetic, training, model (curation: by a person, see the module doc)
    fix: str
    result: str
    report: str | None = None
    slice: str | None = None  # the slice's name (the top-up constraint, or the dev analysis slice)
    measured_on: str | None = None  # real-dev slice recall, dev slice miss rate, ...
    estimate: dict[str, float] | None = None  # the measured change with its interval (estimate, low, high)


def record_round(people_dir: Path, record: RoundRecord) -> Path:
    """Append a round to ``people/rounds.jsonl`` (people only, never an agent's context)."""
    people_dir.mkdir(parents=True, exist_ok=True)
    path = people_dir / "rounds.jsonl"
    with path.open("a") as handle:
        handle.write(record.model_dump_json() + "\n")
    return path


def read_rounds(people_dir: Path) -> list[RoundRecord]:
    path = people_dir / "rounds.jsonl"
    if not path.is_file():
        return []
    return [RoundRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class NextRound:
    """What round two tries: the weakest untried dev slice and an untried kind of fix."""

    slice: str
    slice_effect: float  # miss rate in the slice minus outside it (dev)
    slice_n: int
    confirmed: bool
    fix_kind: str
    change: dict[str, JsonValue]  # the fix's config patch (FIXES)
    reason: str


class _Chosen(TypedDict):
    """The fields of a :class:`RoundTwo` known before its fix is measured."""

    slice: str
    slice_effect: float
    slice_n: int
    confirmed: bool
    fix_kind: str
    change: dict[str, JsonValue]
    reason: str
    ticket: str
    status: str
    chosen_from: str


def pick_next(report: Any, rounds: list[RoundRecord]) -> NextRound:
    """From an ``AnalysisReport`` (dev) and the rounds so far; DataError when nothing is left to try."""
    tried_slices = {r.slice for r in rounds} | {r.weakness for r in rounds}
    candidates = [
        s
        for s in report.slices
        if s.unit == "defect" and s.n >= MIN_SLICE_VOIDS and s.name not in tried_slices
    ]
    if not candidates:
        raise DataError(
            f"the dev analysis shows no untried defect slice of at least {MIN_SLICE_VOIDS} voids; "
            f"round two has nothing to target"
        )
    weakest = min(
        candidates, key=lambda s: (not s.confirmed, -s.effect, -s.score)
    )  # ties: the higher miss rate
    kind, why = _fix_kind(report, {r.fix_kind for r in rounds})
    return NextRound(
        slice=weakest.name,
        slice_effect=weakest.effect,
        slice_n=weakest.n,
        confirmed=weakest.confirmed,
        fix_kind=kind,
        change=FIXES[kind],
        reason=why,
    )


def _fix_kind(report: Any, tried: set[str]) -> tuple[str, str]:
    actions = [r.action for r in report.recommendations]
    asked = [RECOMMENDED_KIND[a] for a in actions if a in RECOMMENDED_KIND]
    for kind in [*asked, *RUN_ORDER]:
        if kind not in tried:
            why = "recommended by the dev analysis" if kind in asked else "the next untried kind of fix"
            if "label_fix" in actions:
                why += "; the analysis also recommends curation (label_fix), left to `segfactory curate`"
            return kind, why
    raise DataError(f"every kind of fix round two runs ({', '.join(RUN_ORDER)}) was tried already")


def round_ticket(tid: str, plan: NextRound, seconds: float, epochs: int, seed: int) -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.TOPUP,
        kind=TicketKind.CONFIG,
        seed=seed,
        change=plan.change,
        hypothesis=f"a {plan.fix_kind} change lowers the dev miss rate of slice {plan.slice}",
        budget=Budget(device_seconds=seconds, epochs=epochs),
        expected_effect=ExpectedEffect(
            metric="miss_rate", slice=plan.slice, direction=Direction.DOWN, size=0.0
        ),
        evidence=[f"dev analysis slice {plan.slice}: effect {plan.slice_effect:+.3f} (n={plan.slice_n})"],
    )


def slice_change(
    dev: Any, base_prob: np.ndarray, new_prob: np.ndarray, slice_name: str, threshold: float, seed: int
) -> SliceChange:
    """New minus baseline miss rate over the dev voids of ``slice_name`` (paired, bootstrap over voids)."""

    base = Evaluated(dev, base_prob).errors(threshold).defect_outcome
    new = Evaluated(dev, new_prob).errors(threshold).defect_outcome
    units = defect_units(dev.image_meta, dev.defects, base, reference=new)  # outcome: base - new, same voids
    defs = one_way_slices(units, [])
    mask = slice_masks([*defs, *two_way_slices(defs)], units).get(slice_name)
    if mask is None or not mask.any():
        raise DataError(f"slice {slice_name!r} holds no dev voids under the new model's outcomes")
    ci = bootstrap_mean_ci(-units.outcome[mask], n_boot=N_BOOT, seed=seed)
    return SliceChange(estimate=ci.estimate, low=ci.low, high=ci.high, n=float(mask.sum()))


def result_text(change: SliceChange) -> str:
    if change.high < 0:
        return f"the slice's dev miss rate fell by {-change.estimate:.3f} (interval below 0): the fix helped"
    if change.low > 0:
        return f"the slice's dev miss rate rose by {change.estimate:.3f} (interval above 0): the fix hurt"
    return "the fix did nothing measurable: the interval of the slice's dev miss-rate change contains 0"


Scorer = Callable[[Path, np.ndarray], np.ndarray]  # (model path, images (N, H, W)) -> probabilities


def run_round_two(
    home: Home,
    topup_report: TopupReport,
    *,
    executor: TicketExecutor,
    run_id: str,
    scorer: Scorer | None = None,
    threshold: float = 0.5,
) -> RoundTwo:
    """Analyse the top-up's nothing-arm model on dev, pick, run one fix ticket, measure, record."""

    if scorer is None:
        scorer = default_scorer
    baseline = next((t for t in topup_report.tickets if t.arm == "nothing" and t.model), None)
    if baseline is None:
        raise DataError("round two needs the top-up's nothing-arm model, which did not train")
    version = resolve(home.root, topup_report.base)
    dev = read_split(version.dev)
    base_prob = np.asarray(scorer(Path(str(baseline.model)), np.asarray(dev.images))).reshape(dev.masks.shape)
    report, _ = analyse(
        Evaluated(dev, base_prob),
        data=dev.content_hash or str(version.dev),
        threshold=threshold,
        seed=topup_report.seed,
    )
    people = home.people_dir(run_id)
    plan = pick_next(report, read_rounds(people))
    ticket = round_ticket(
        f"{run_id}-round2-{plan.fix_kind}",
        plan,
        topup_report.ticket_seconds,
        topup_report.epochs,
        topup_report.seed,
    )
    outcome = executor(ticket, version)
    status, model = outcome.status, Path(outcome.model) if outcome.model else None
    fields: _Chosen = {
        "slice": plan.slice,
        "slice_effect": plan.slice_effect,
        "slice_n": plan.slice_n,
        "confirmed": plan.confirmed,
        "fix_kind": plan.fix_kind,
        "change": plan.change,
        "reason": plan.reason,
        "ticket": ticket.id,
        "status": status,
        "chosen_from": "dev analysis of the nothing-arm model (trust rule 9)",
    }
    if model is None:
        out = RoundTwo(**fields, result=f"the fix ticket did not train ({status}); nothing was measured")
    else:
        new_prob = np.asarray(scorer(model, np.asarray(dev.images))).reshape(dev.masks.shape)
        change = slice_change(dev, base_prob, new_prob, plan.slice, threshold, topup_report.seed)
        out = RoundTwo(**fields, result=result_text(change), miss_rate_change=change)
    (people / "round2.json").write_text(json.dumps(out.as_json(), indent=2, sort_keys=True) + "\n")
    record_round(
        people,
        RoundRecord(
            weakness=f"dev miss rate on slice {plan.slice}",
            fix_kind=plan.fix_kind,
            fix=json.dumps(plan.change, sort_keys=True),
            result=out.result,
            report=str(people / "round2.json"),
            slice=plan.slice,
            measured_on="dev slice miss rate (paired against the nothing arm)",
            estimate=out.miss_rate_change.model_dump() if out.miss_rate_change else None,
        ),
    )
    return out
