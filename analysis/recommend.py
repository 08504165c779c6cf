"""Rule-based recommendations: analysis inputs -> ``Recommendation`` records.

The rules live in ``policies/recommend.yaml``; this module only evaluates them. Each
recommendation carries its evidence (counts and intervals), the action, and a falsifiable
predicted effect (metric, slice, direction, size) that hit-rate bookkeeping later checks.

A predicted size is a share of the measured shortfall (the slice's excess failure, the gap, the
drop). Which share is learnt per rule: the rule's written ``effect_share`` is a prior worth
``prior_weight`` measurements, averaged with the shares the same rule's fixes recovered on dev
before in this home (``Inputs.measured_shares``, from ``agents._predictions``). The evidence's
``prediction`` entry says how the size was reached.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.labels import LabelEstimate
from analysis.slices import SliceRow
from segfactory.errors import PolicyError
from segfactory.records import Direction, ExpectedEffect, Recommendation, TicketKind
from synthetic.slices import can_draw

POLICY_PATH = Path(__file__).resolve().parent.parent / "policies" / "recommend.yaml"
TOPUP_IMAGES = 250  # images of targeted synthetic data a slice recommendation asks for
InputName = Literal[
    "train_label_excess",
    "label_shift",
    "empty_label_hits",
    "underfit",
    "collapse",
    "overall_drop",
    "slice_finding",
    "learning_curve_gain",
    "train_dev_gap",
    "perturbation_drop",
    "dev_label_rate",
    "always",
]


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    input: InputName
    min_value: float = Field(ge=0)
    action: str
    kind: TicketKind
    metric: str = "miss_rate"
    effect_share: float = Field(ge=0, le=1)
    attributes: list[str] = Field(default_factory=list)
    max_per_rule: int = Field(default=1, ge=1)
    min_ratio_to_slice: float = Field(default=0.0, ge=0)
    min_model_dice: float = Field(default=0.0, ge=0, le=1)  # silent when the model's dev dice is lower
    # slice rules: slices whose train coverage is at most this come first (None: strength alone)
    uncovered_first: float | None = Field(default=None, ge=0)
    # slice rules whose remedy is drawing more of the slice: only slices the generator can draw
    drawable_only: bool = False


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1]
    max_recommendations: int = Field(ge=1)
    # a rule's written effect_share counts as this many measurements against those of this home
    prior_weight: float = Field(default=3.0, gt=0)
    rules: list[Rule]


def load_policy(path: Path = POLICY_PATH) -> Policy:
    """Parse and validate the rules file; raises PolicyError naming the file and the fault."""
    try:
        return Policy.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise PolicyError(f"recommendation policy {path} is invalid: {exc}") from None


@dataclass
class Inputs:
    """Everything the rules may look at; ``None`` means "not measured" and such rules stay silent."""

    findings: list[SliceRow] = field(default_factory=list)  # confirmed slices only
    overall_drop: float | None = None  # candidate minus reference defect miss rate
    label_shift: float | None = (
        None  # median relative change of confidence on true dev voids vs the reference
    )
    underfit: float | None = (
        None  # reference train dice minus candidate train dice (each on its own train set)
    )
    train_dev_gap: float | None = None
    learning_curve: dict[str, float] | None = None  # "0.25"/"0.5"/"1.0" -> dev dice
    dev_labels: LabelEstimate | None = None
    train_labels: LabelEstimate | None = None
    perturbations: dict[str, float] | None = None  # perturbation -> dev dice drop
    model_dice: float | None = None  # the model's mean dev dice (rules may need a competent model)
    collapse: float | None = (
        None  # 1 - candidate positive dev pixels / unplanted models' median (relative runs)
    )
    empty_hits: tuple[float, int, float, int] | None = (
        None  # train rate, n, dev rate, n: images labelled empty
    )
    # where the model finds a void (a false-alarm component), on the train split and on dev
    # rule id -> the shares of their shortfall its fixes recovered on dev before, in this home
    measured_shares: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def strongest(self) -> list[SliceRow]:
        """Findings ordered by strength (effect times root count), strongest first."""
        return sorted(self.findings, key=lambda r: -r.effect * math.sqrt(r.n))


def _scalar(rule: Rule, inputs: Inputs) -> tuple[float | None, dict[str, object]]:
    """The rule's input value and its evidence, or (None, {}) when it was not measured."""
    if rule.input == "train_label_excess" and inputs.dev_labels and inputs.train_labels:
        tr, dv = inputs.train_labels, inputs.dev_labels
        return tr.rate - dv.rate, {
            "train_labels": tr.model_dump(exclude={"flagged_ids"}),
            "dev_labels": dv.model_dump(exclude={"flagged_ids"}),
        }
    if rule.input == "overall_drop" and inputs.overall_drop is not None:
        evidence: dict[str, object] = {"overall_miss_rate_increase": inputs.overall_drop}
        if inputs.findings:  # a drop concentrated in one slice is that slice's, not the model's
            top = inputs.strongest()[0]
            if top.complement < rule.min_ratio_to_slice * top.score:
                return None, {}
            evidence.update(
                top_slice=top.name, top_slice_score=top.score, top_slice_complement=top.complement
            )
        return inputs.overall_drop, evidence
    if rule.input == "label_shift" and inputs.label_shift is not None:
        return abs(inputs.label_shift), {"confidence_shift_vs_reference": inputs.label_shift}
    if rule.input == "empty_label_hits" and inputs.empty_hits is not None:
        train_rate, n_train, dev_rate, n_dev = inputs.empty_hits
        return train_rate - dev_rate, {
            "train_empty_images_with_a_void_found": train_rate,
            "train_empty_images": n_train,
            "dev_empty_images_with_a_void_found": dev_rate,
            "dev_empty_images": n_dev,
        }
    if rule.input == "collapse" and inputs.collapse is not None:
        return inputs.collapse, {"positive_pixels_lost_vs_unplanted": inputs.collapse}
    if rule.input == "underfit" and inputs.underfit is not None:
        return inputs.underfit, {"train_dice_below_reference": inputs.underfit}
    if rule.input == "learning_curve_gain" and inputs.learning_curve:
        curve = inputs.learning_curve
        if "0.5" in curve and "1.0" in curve:
            return curve["1.0"] - curve["0.5"], {"learning_curve": curve}
    if rule.input == "train_dev_gap" and inputs.train_dev_gap is not None:
        return inputs.train_dev_gap, {"train_dev_gap": inputs.train_dev_gap}
    if rule.input == "perturbation_drop" and inputs.perturbations:
        name = max(inputs.perturbations, key=lambda k: inputs.perturbations[k] if inputs.perturbations else 0)
        return inputs.perturbations[name], {"perturbation": name, "drops": inputs.perturbations}
    if rule.input == "dev_label_rate" and inputs.dev_labels:
        return inputs.dev_labels.rate, {"dev_labels": inputs.dev_labels.model_dump(exclude={"flagged_ids"})}
    return None, {}


def _change(rule: Rule, slice_row: SliceRow | None) -> dict[str, object]:
    """The recommendation's change (a ticket's config patch), as JSON for the record."""
    if slice_row is None:
        return {"action": rule.action}
    if rule.action == "data_request":
        return {
            "action": rule.action,
            "request": f"real images of the kind '{slice_row.name}'",
            "slice": slice_row.name,
        }
    return {
        "action": rule.action,
        "synthetic": {"slice": slice_row.name, "attributes": slice_row.attributes, "n": TOPUP_IMAGES},
    }


PREDICTION_KEY = "prediction"  # evidence key: how the predicted size was reached


@dataclass(frozen=True)
class Sizing:
    """The share of a shortfall a rule's fix is predicted to recover, and how it was reached."""

    prior_share: float
    prior_weight: float
    measured: tuple[float, ...]

    @property
    def share(self) -> float:
        """The prior worth ``prior_weight`` measurements, averaged with the measured shares, in 0..1."""
        total = self.prior_weight * self.prior_share + sum(self.measured)
        return min(1.0, max(0.0, total / (self.prior_weight + len(self.measured))))

    def size(self, shortfall: float) -> float:
        return round(self.share * shortfall, 4)

    def evidence(self, shortfall: float) -> dict[str, object]:
        n = len(self.measured)
        return {
            "shortfall": round(shortfall, 6),
            "prior_share": self.prior_share,
            "prior_weight": self.prior_weight,
            "measured": n,
            "measured_mean": round(sum(self.measured) / n, 4) if n else None,
            "share": round(self.share, 4),
        }


def sizing(rule: Rule, policy: Policy, measured: Mapping[str, Sequence[float]]) -> Sizing:
    """How ``rule``'s predictions are sized now: a rule that predicts nothing (``effect_share`` 0,
    "leave it") keeps its zero."""
    seen = tuple(measured.get(rule.id, ())) if rule.effect_share > 0 else ()
    return Sizing(prior_share=rule.effect_share, prior_weight=policy.prior_weight, measured=seen)


def _from_slice(rule: Rule, row: SliceRow, k: int, sized: Sizing) -> Recommendation:
    evidence = {
        "slice": row.name,
        "unit": row.unit,
        "n": row.n,
        "score": row.score,
        "interval": [row.low, row.high],
        "complement": row.complement,
        "effect": row.effect,
        "q_value": row.q_value,
        "confirm_n": row.confirm_n,
        "confirm_effect": row.confirm_effect,
        "confirm_p": row.confirm_p,
    }
    if row.train_coverage is not None:
        evidence["train_coverage"] = row.train_coverage
    evidence[PREDICTION_KEY] = sized.evidence(row.effect)
    metric = "miss_rate" if row.unit == "defect" else "one_minus_dice"
    effect = ExpectedEffect(
        metric=metric, slice=row.name, direction=Direction.DOWN, size=sized.size(row.effect)
    )
    rationale = (
        f"{row.name}: {row.unit} failure {row.score:.2f} vs {row.complement:.2f} "
        f"elsewhere (n={row.n}), reproduced on held-out half"
    )
    if _uncovered(row, rule.uncovered_first):
        rationale += f"; training holds {row.train_coverage:.0%} of dev's share of such {row.unit}s"
    return Recommendation(
        id=f"{rule.id}-{k}",
        evidence=evidence,
        action=rule.action,
        kind=rule.kind,
        change=_change(rule, row),
        predicted_effect=effect,
        rationale=rationale,
    )


def _from_scalar(rule: Rule, value: float, evidence: dict[str, object], sized: Sizing) -> Recommendation:
    down = rule.metric == "miss_rate"
    direction = Direction.NONE if rule.effect_share == 0 else (Direction.DOWN if down else Direction.UP)
    effect = ExpectedEffect(metric=rule.metric, slice="all", direction=direction, size=sized.size(abs(value)))
    return Recommendation(
        id=f"{rule.id}-0",
        evidence={"value": value, **evidence, PREDICTION_KEY: sized.evidence(abs(value))},
        action=rule.action,
        kind=rule.kind,
        change=_change(rule, None),
        predicted_effect=effect,
        rationale=f"{rule.input} = {value:.3f} (threshold {rule.min_value})",
    )


def _uncovered(row: SliceRow, at_most: float | None) -> bool:
    return at_most is not None and row.train_coverage is not None and row.train_coverage <= at_most


def _fire(rule: Rule, inputs: Inputs, sized: Sizing) -> list[Recommendation]:
    if rule.min_model_dice > 0 and (inputs.model_dice is None or inputs.model_dice < rule.min_model_dice):
        return []
    if rule.input == "slice_finding":
        rows = [
            r
            for r in inputs.strongest()
            if r.effect >= rule.min_value
            and any(a in rule.attributes for a in r.attributes)
            and (not rule.drawable_only or can_draw(r.name))
        ]
        if rule.uncovered_first is not None:
            rows.sort(key=lambda r: not _uncovered(r, rule.uncovered_first))  # stable: strength within
        return [_from_slice(rule, r, k, sized) for k, r in enumerate(rows[: rule.max_per_rule])]
    value, evidence = _scalar(rule, inputs)
    if value is None or value < rule.min_value:
        return []
    return [_from_scalar(rule, value, evidence, sized)]


def recommend(inputs: Inputs, policy: Policy | None = None) -> list[Recommendation]:
    """Recommendations in rule order, at most ``policy.max_recommendations``; "leave it" only alone."""
    policy = policy or load_policy()
    out: list[Recommendation] = []
    for rule in policy.rules:
        sized = sizing(rule, policy, inputs.measured_shares)
        if rule.input == "always":
            if not out:
                out.append(_from_scalar(rule, 0.0, {"reason": "no rule fired above its threshold"}, sized))
            continue
        out.extend(_fire(rule, inputs, sized))
    return out[: policy.max_recommendations]
