"""Scoring predictions: every executed recommendation against what it said it would do.

When a recommendation's ticket ends, its predicted effect (metric, slice, direction, size) is
measured on dev for the candidate and for its parent (the incumbent it patched), and
``analysis.hitrate.mark`` records whether it held. The default action at the same cost (the
parent retrained with a fresh seed, a ``default-action`` control ticket; on the classical
baseline, the unchanged base config every ticket of the round patches) is scored on the same
prediction, so the hit rate has a baseline: a recommendation that "holds" as often as a seed
re-run does has not shown it knows anything. At the milestone, promoted recommendations are
scored again on the sealed tier where the milestone's metrics can measure the prediction.

Everything here is for people (``runs/<id>/people/``) and never reaches an agent's context.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict

from agents.incumbent import DEFAULT_ACTION_EVIDENCE
from agents.validate import BASE_CONFIG_EVIDENCE
from analysis import hitrate
from analysis.effects import ALL, measure
from analysis.hitrate import ArmRate
from analysis.report import Evaluated
from gate.milestone_report import ModelScore
from segfactory.files import write_atomic
from segfactory.home import Home
from segfactory.layout import (
    ControlPrediction,
    DefaultOutcome,
    DefaultPrediction,
    DevPrediction,
    Lineage,
    Promotion,
    RunLayout,
    SealedPrediction,
)
from segfactory.records import ExpectedEffect, Ticket
from segfactory.stats import Interval, wilson_interval
from synthetic.splits import Split

RECOMMENDATION_PREFIX = "recommendation:"
# Sealed milestone metrics that can measure a prediction on the whole tier: metric -> (key, sign).
# miss_rate on all voids is 1 - object recall.
SEALED_METRICS = {
    "object_f1": ("object_f1", 1.0),
    "dice": ("dice", 1.0),
    "pixel_iou": ("pixel_iou", 1.0),
    "object_recall": ("object_recall", 1.0),
    "miss_rate": ("object_recall", -1.0),
    "one_minus_dice": ("dice", -1.0),
}


def recommendation_of(ticket: Ticket) -> str | None:
    """The recommendation id a ticket executes (its evidence), or None."""
    for item in ticket.evidence:
        if item.startswith(RECOMMENDATION_PREFIX):
            return item[len(RECOMMENDATION_PREFIX) :]
    return None


class _DevRow(TypedDict, total=False):
    """The fields of a :class:`DevPrediction` as ``Predictions._dev`` sets them (``reason``: only
    when the effect cannot be measured)."""

    ticket_id: str
    recommendation_id: str
    parent_sha256: str
    predicted: ExpectedEffect
    change: dict[str, object]
    candidate: float | None
    parent: float | None
    observed_change: float | None
    held: bool | None
    n: int
    default: DefaultOutcome | None
    reason: str


@dataclass
class Predictions:
    """Dev scoring of predictions for one run; ``score`` maps (model, images) to probabilities."""

    home: Home
    run_id: str
    dev: Split
    threshold: float
    score: Callable[[Path, np.ndarray], np.ndarray]
    _evaluated: dict[str, Evaluated] = field(default_factory=dict, repr=False)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.home, self.run_id)

    def evaluated(self, key: str, model: Path) -> Evaluated:
        if key not in self._evaluated:
            prob = np.asarray(self.score(model, self.dev.images))[:, 0]
            self._evaluated[key] = Evaluated(self.dev, prob)
        return self._evaluated[key]

    def after_ticket(
        self, ticket: Ticket, lineage: Lineage, model: Path, parent_model: Path
    ) -> DevPrediction | None:
        """Score a finished ticket: its own prediction, or (a default-action control) those of its round."""
        if (
            ticket.evidence in ([DEFAULT_ACTION_EVIDENCE], [BASE_CONFIG_EVIDENCE])
            and ticket.replicate_of is None
        ):
            # the control of its round: the best retrained with a fresh seed, or, on the classical
            # baseline (which no config trained), the base config that every ticket of the round patches
            self._record_control(ticket.id, lineage, model, parent_model)
            return None
        rec = recommendation_of(ticket)
        if rec is None or ticket.replicate_of is not None:  # a replicate re-trains a scored prediction
            return None
        candidate = self.evaluated(ticket.id, model)
        parent = self.evaluated(lineage.parent_sha256, parent_model)
        return self._dev(ticket, rec, lineage, candidate, parent)

    def _dev(
        self, ticket: Ticket, rec: str, lineage: Lineage, candidate: Evaluated, parent: Evaluated
    ) -> DevPrediction:
        effect = ticket.expected_effect
        got, base = measure(effect, candidate, self.threshold), measure(effect, parent, self.threshold)
        row: _DevRow = {
            "ticket_id": ticket.id,
            "recommendation_id": rec,
            "parent_sha256": lineage.parent_sha256,
            "predicted": effect,
            "change": ticket.change,
            "candidate": None,
            "parent": None,
            "observed_change": None,
            "held": None,
            "n": 0,
            "default": None,
        }
        if got is None or base is None:
            row["reason"] = f"{effect.metric} on slice {effect.slice!r} cannot be measured on dev"
        else:
            change = got.value - base.value
            outcome = hitrate.mark(
                self.home,
                self.run_id,
                arm="recommendation",
                recommendation_id=rec,
                ticket_id=ticket.id,
                predicted=effect,
                observed_change=change,
            )
            row.update(
                {
                    "candidate": got.value,
                    "parent": base.value,
                    "observed_change": change,
                    "held": outcome.held,
                    "n": got.n,
                }
            )
            control = self._control_for(lineage.parent_sha256)
            if control is not None:
                row["default"] = self._default_outcome(effect, rec, control, parent)
        prediction = DevPrediction(stage="dev", **row)
        self.layout.append_prediction(prediction)
        return prediction

    def _control_for(self, parent_sha: str) -> tuple[str, Evaluated] | None:
        for row in self.layout.predictions():
            if isinstance(row, ControlPrediction) and row.parent_sha256 == parent_sha:
                return row.ticket_id, self.evaluated(row.ticket_id, Path(row.model))
        return None

    def _default_outcome(
        self, effect: ExpectedEffect, rec: str, control: tuple[str, Evaluated], parent: Evaluated
    ) -> DefaultOutcome | None:
        ticket_id, evaluated = control
        got, base = measure(effect, evaluated, self.threshold), measure(effect, parent, self.threshold)
        if got is None or base is None:
            return None
        change = got.value - base.value
        outcome = hitrate.mark(
            self.home,
            self.run_id,
            arm="default",
            recommendation_id=rec,
            ticket_id=ticket_id,
            predicted=effect,
            observed_change=change,
        )
        return DefaultOutcome(ticket_id=ticket_id, observed_change=change, held=outcome.held)

    def _waiting_for_default(self, parent_sha: str) -> list[DevPrediction]:
        rows = self.layout.predictions()
        done = {r.ticket_id for r in rows if isinstance(r, DefaultPrediction)}
        return [
            r
            for r in rows
            if isinstance(r, DevPrediction)
            and r.parent_sha256 == parent_sha
            and r.held is not None
            and r.default is None
            and r.ticket_id not in done
        ]

    def _record_control(self, ticket_id: str, lineage: Lineage, model: Path, parent_model: Path) -> None:
        """A default-action control finished: remember it for its round and score the waiting rows."""
        control = self.evaluated(ticket_id, model)
        parent = self.evaluated(lineage.parent_sha256, parent_model)
        waiting = self._waiting_for_default(lineage.parent_sha256)
        self.layout.append_prediction(
            ControlPrediction(
                stage="control", ticket_id=ticket_id, parent_sha256=lineage.parent_sha256, model=str(model)
            )
        )
        for row in waiting:
            outcome = self._default_outcome(
                row.predicted, row.recommendation_id, (ticket_id, control), parent
            )
            self.layout.append_prediction(
                DefaultPrediction(stage="default", ticket_id=row.ticket_id, control=outcome)
            )

    def sealed(
        self, promoted: list[Promotion], sealed_models: dict[str, ModelScore]
    ) -> list[SealedPrediction]:
        """Promoted recommendations scored on the sealed tier, where its metrics can measure them."""
        dev_rows = {r.ticket_id: r for r in self.layout.predictions() if isinstance(r, DevPrediction)}
        out = []
        for promo in promoted:
            row = dev_rows.get(promo.ticket_id)
            if row is None:
                continue
            out.append(
                _sealed_row(row, sealed_models.get(promo.sha256), sealed_models.get(row.parent_sha256))
            )
        for item in out:
            self.layout.append_prediction(item)
        return out


def _sealed_row(row: DevPrediction, child: ModelScore | None, parent: ModelScore | None) -> SealedPrediction:
    effect = row.predicted
    base = {"ticket_id": row.ticket_id, "recommendation_id": row.recommendation_id, "predicted": effect}
    none = {"observed_change": None, "held": None}
    metric = SEALED_METRICS.get(effect.metric)
    if effect.slice != ALL or metric is None:
        reason = f"the sealed milestone reports no {effect.metric} on slice {effect.slice!r}"
        return SealedPrediction(stage="sealed", **base, **none, reason=reason)
    if child is None or parent is None:
        reason = "the milestone did not score both the model and its parent on sealed"
        return SealedPrediction(stage="sealed", **base, **none, reason=reason)
    key, sign = metric
    change = sign * (_point(getattr(child, key)) - _point(getattr(parent, key)))
    return SealedPrediction(stage="sealed", **base, observed_change=change, held=hitrate.held(effect, change))


def _point(value: Interval | float) -> float:
    return float(value.estimate if isinstance(value, Interval) else value)


class HitRates(BaseModel):
    """Both dev hit rates (recommendations against the default action) and the sealed one."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    run_id: str
    recommendation: ArmRate
    default: ArmRate
    sealed: ArmRate  # promoted predictions that held on the sealed tier


class PredictionSummary(BaseModel):
    """``people/predictions_summary.json``: each scored prediction, dev then sealed, and the hit rates."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rows: list[DevPrediction | SealedPrediction]
    hit_rate: HitRates

    def as_json(self) -> dict[str, object]:
        return {
            "rows": [r.line() for r in self.rows],
            "hit_rate": self.hit_rate.model_dump(mode="json"),
        }


def summary(home: Home, run_id: str) -> PredictionSummary:
    """Predicted against measured, per executed recommendation, and both hit rates with intervals."""
    rows = RunLayout(home, run_id).predictions()
    later_default = {r.ticket_id: r.control for r in rows if isinstance(r, DefaultPrediction)}
    scored: list[DevPrediction | SealedPrediction] = []
    for r in rows:
        if isinstance(r, DevPrediction):
            scored.append(r.model_copy(update={"default": later_default.get(r.ticket_id, r.default)}))
        elif isinstance(r, SealedPrediction):
            scored.append(r)
    sealed = [r for r in scored if isinstance(r, SealedPrediction) and r.held is not None]
    iv = wilson_interval(sum(bool(r.held) for r in sealed), len(sealed))
    dev_rates = hitrate.summary(home, run_id)
    rates = HitRates(
        run_id=dev_rates.run_id,
        recommendation=dev_rates.recommendation,
        default=dev_rates.default,
        sealed=ArmRate(
            held=sum(bool(r.held) for r in sealed), n=len(sealed), rate=iv.estimate, low=iv.low, high=iv.high
        ),
    )
    return PredictionSummary(rows=scored, hit_rate=rates)


def write_summary(home: Home, run_id: str) -> PredictionSummary:
    data = summary(home, run_id)
    path = RunLayout(home, run_id).predictions_summary
    write_atomic(path, json.dumps(data.as_json(), indent=2, sort_keys=True, default=str) + "\n")
    return data
