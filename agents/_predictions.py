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
from analysis.recommend import PREDICTION_KEY, load_policy, sizing
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
from segfactory.records import Direction, ExpectedEffect, Ticket
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
    rule: str
    realised_share: float


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
                    "rule": rule_of(rec),
                }
            )
            shortfall = self._shortfall(rec, lineage.parent_sha256, effect)
            if shortfall is not None:
                row["realised_share"] = round(_signed(effect, change) / shortfall, 6)
            control = self._control_for(lineage.parent_sha256)
            if control is not None:
                row["default"] = self._default_outcome(effect, rec, control, parent)
        prediction = DevPrediction(stage="dev", **row)
        self.layout.append_prediction(prediction)
        return prediction

    def _shortfall(self, rec: str, parent_sha: str, effect: ExpectedEffect) -> float | None:
        """The shortfall the recommendation's size was a share of, from the analysis of the best it
        was made on; None when that analysis or its sizing is missing, or when the ticket predicts
        something else than the recommendation did (an LLM's own prediction)."""
        path = self.layout.analysis_dir(parent_sha) / "report.json"
        if not path.is_file():
            return None
        for made in json.loads(path.read_text()).get("recommendations", []):
            if made.get("id") != rec:
                continue
            said = made.get("predicted_effect", {})
            if (said.get("metric"), said.get("slice")) != (effect.metric, effect.slice):
                return None
            shortfall = made.get("evidence", {}).get(PREDICTION_KEY, {}).get("shortfall")
            return float(shortfall) if isinstance(shortfall, int | float) and shortfall > 0 else None
        return None

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


def rule_of(recommendation_id: str) -> str:
    """The rule a recommendation came from: its id without the trailing index (``targeted-synthetic-1``)."""
    head, _, tail = recommendation_id.rpartition("-")
    return head if head and tail.isdigit() else recommendation_id


def _signed(effect: ExpectedEffect, change: float) -> float:
    """The change in the predicted direction (positive: the way the prediction said)."""
    return -change if effect.direction == Direction.DOWN else change


def measured_shares(home: Home) -> dict[str, list[float]]:
    """Per rule, the shares of their shortfall its fixes recovered on dev, over every run of the
    home in run order: what the next prediction of that rule is sized from (with its prior)."""
    out: dict[str, list[float]] = {}
    if not home.runs.is_dir():
        return out
    for run in sorted(p.name for p in home.runs.iterdir() if (p / "people" / "predictions.jsonl").is_file()):
        for row in RunLayout(home, run).predictions():
            if isinstance(row, DevPrediction) and row.rule and row.realised_share is not None:
                out.setdefault(row.rule, []).append(row.realised_share)
    return out


class Calibration(BaseModel):
    """One rule's predictions in a run against what they measured on dev, and the share its next
    prediction will use (the prior averaged with every measurement of this home)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rule: str
    scored: int  # this run's predictions of the rule measured on dev
    mean_predicted: float  # mean predicted size (in the predicted direction)
    mean_measured: float  # mean measured change in the predicted direction
    prior_share: float
    measured_in_home: int  # realised shares this home has for the rule
    next_share: float  # the share the rule's next prediction uses


def calibration(home: Home, run_id: str) -> list[Calibration]:
    """Per rule with a prediction scored in ``run_id``: predicted against measured, and what it learnt."""
    policy = load_policy()
    rules = {r.id: r for r in policy.rules}
    home_shares = measured_shares(home)
    rows: dict[str, list[DevPrediction]] = {}
    for row in RunLayout(home, run_id).predictions():
        if isinstance(row, DevPrediction) and row.observed_change is not None:
            rows.setdefault(row.rule or rule_of(row.recommendation_id), []).append(row)
    out = []
    for rule_id, scored in rows.items():
        rule = rules.get(rule_id)
        if rule is None:  # a rule since removed from the policy: nothing to size
            continue
        sized = sizing(rule, policy, home_shares)
        out.append(
            Calibration(
                rule=rule_id,
                scored=len(scored),
                mean_predicted=float(np.mean([r.predicted.size for r in scored])),
                mean_measured=float(
                    np.mean([_signed(r.predicted, float(r.observed_change or 0)) for r in scored])
                ),
                prior_share=rule.effect_share,
                measured_in_home=len(sized.measured),
                next_share=sized.share,
            )
        )
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
