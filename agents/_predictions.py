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
from typing import Any

import numpy as np

from agents.incumbent import DEFAULT_ACTION_EVIDENCE, Lineage
from agents.validate import BASE_CONFIG_EVIDENCE
from analysis import hitrate
from analysis.effects import ALL, measure
from analysis.report import Evaluated
from segfactory.files import append_jsonl, read_jsonl, write_atomic
from segfactory.home import Home
from segfactory.records import ExpectedEffect, Ticket
from segfactory.stats import wilson_interval

PREDICTIONS_FILE = "predictions.jsonl"  # people/: one row per scored prediction (dev, then sealed)
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


@dataclass
class Predictions:
    """Dev scoring of predictions for one run; ``score`` maps (model, images) to probabilities."""

    home: Home
    run_id: str
    dev: Any  # synthetic.splits.Split
    threshold: float
    score: Callable[[Path, np.ndarray], np.ndarray]
    _evaluated: dict[str, Evaluated] = field(default_factory=dict, repr=False)

    @property
    def file(self) -> Path:
        return self.home.people_dir(self.run_id) / PREDICTIONS_FILE

    def evaluated(self, key: str, model: Path) -> Evaluated:
        if key not in self._evaluated:
            prob = np.asarray(self.score(model, self.dev.images))[:, 0]
            self._evaluated[key] = Evaluated(self.dev, prob)
        return self._evaluated[key]

    def rows(self) -> list[dict[str, Any]]:
        return read_jsonl(self.file)

    def after_ticket(
        self, ticket: Ticket, lineage: Lineage, model: Path, parent_model: Path
    ) -> dict[str, Any] | None:
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
    ) -> dict[str, Any]:
        effect = ticket.expected_effect
        got, base = measure(effect, candidate, self.threshold), measure(effect, parent, self.threshold)
        row: dict[str, Any] = {
            "stage": "dev",
            "ticket_id": ticket.id,
            "recommendation_id": rec,
            "parent_sha256": lineage.parent_sha256,
            "predicted": effect.model_dump(mode="json"),
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
                candidate=got.value, parent=base.value, observed_change=change, held=outcome.held, n=got.n
            )
            control = self._control_for(lineage.parent_sha256)
            if control is not None:
                row["default"] = self._default_outcome(effect, rec, control, parent)
        append_jsonl(self.file, row)
        return row

    def _control_for(self, parent_sha: str) -> tuple[str, Evaluated] | None:
        for row in read_jsonl(self.file):
            if row.get("stage") == "control" and row.get("parent_sha256") == parent_sha:
                return row["ticket_id"], self.evaluated(row["ticket_id"], Path(row["model"]))
        return None

    def _default_outcome(
        self, effect: ExpectedEffect, rec: str, control: tuple[str, Evaluated], parent: Evaluated
    ) -> dict[str, Any] | None:
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
        return {"ticket_id": ticket_id, "observed_change": change, "held": outcome.held}

    def _waiting_for_default(self, parent_sha: str) -> list[dict[str, Any]]:
        rows = read_jsonl(self.file)
        done = {r["ticket_id"] for r in rows if r.get("stage") == "default"}
        return [
            r
            for r in rows
            if r.get("stage") == "dev"
            and r.get("parent_sha256") == parent_sha
            and r.get("held") is not None
            and r.get("default") is None
            and r["ticket_id"] not in done
        ]

    def _default(self, row: dict[str, Any], control_id: str, control: Evaluated, parent: Evaluated) -> None:
        effect = ExpectedEffect.model_validate(row["predicted"])
        outcome = self._default_outcome(effect, row["recommendation_id"], (control_id, control), parent)
        append_jsonl(self.file, {"stage": "default", "ticket_id": row["ticket_id"], "control": outcome})

    def _record_control(self, ticket_id: str, lineage: Lineage, model: Path, parent_model: Path) -> None:
        """A default-action control finished: remember it for its round and score the waiting rows."""
        control = self.evaluated(ticket_id, model)
        parent = self.evaluated(lineage.parent_sha256, parent_model)
        waiting = self._waiting_for_default(lineage.parent_sha256)
        append_jsonl(
            self.file,
            {
                "stage": "control",
                "ticket_id": ticket_id,
                "parent_sha256": lineage.parent_sha256,
                "model": str(model),
            },
        )
        for row in waiting:
            self._default(row, ticket_id, control, parent)

    def sealed(self, promoted: list[dict[str, Any]], milestone: dict[str, Any]) -> list[dict[str, Any]]:
        """Promoted recommendations scored on the sealed tier, where its metrics can measure them."""
        models = (milestone.get("tiers", {}).get("sealed", {}) or {}).get("models", {})
        dev_rows = {r["ticket_id"]: r for r in read_jsonl(self.file) if r.get("stage") == "dev"}
        out = []
        for promo in promoted:
            row = dev_rows.get(promo["ticket_id"])
            if row is None:
                continue
            out.append(self._sealed_row(row, models.get(promo["sha256"]), models.get(row["parent_sha256"])))
        for item in out:
            append_jsonl(self.file, item)
        return out

    def _sealed_row(
        self, row: dict[str, Any], child: dict[str, Any] | None, parent: dict[str, Any] | None
    ) -> dict[str, Any]:
        effect = ExpectedEffect.model_validate(row["predicted"])
        base = {
            "stage": "sealed",
            "ticket_id": row["ticket_id"],
            "recommendation_id": row["recommendation_id"],
            "predicted": row["predicted"],
            "observed_change": None,
            "held": None,
        }
        metric = SEALED_METRICS.get(effect.metric)
        if effect.slice != ALL or metric is None:
            return {
                **base,
                "reason": f"the sealed milestone reports no {effect.metric} on slice {effect.slice!r}",
            }
        if child is None or parent is None:
            return {**base, "reason": "the milestone did not score both the model and its parent on sealed"}
        key, sign = metric
        change = sign * (_point(child[key]) - _point(parent[key]))
        return {**base, "observed_change": change, "held": hitrate.held(effect, change)}


def _point(value: Any) -> float:
    return float(value["estimate"] if isinstance(value, dict) else value)


def summary(home: Home, run_id: str) -> dict[str, Any]:
    """Predicted against measured, per executed recommendation, and both hit rates with intervals."""
    rows = read_jsonl(home.people_dir(run_id) / PREDICTIONS_FILE)
    later_default = {r["ticket_id"]: r["control"] for r in rows if r.get("stage") == "default"}
    rows = [
        {**r, "default": later_default.get(r["ticket_id"], r.get("default"))}
        if r.get("stage") == "dev"
        else r
        for r in rows
    ]
    rates = hitrate.summary(home, run_id).model_dump(mode="json")
    sealed = [r for r in rows if r.get("stage") == "sealed"]
    scored = [r for r in sealed if r.get("held") is not None]

    iv = wilson_interval(sum(bool(r["held"]) for r in scored), len(scored))
    rates["sealed"] = {
        "held": sum(bool(r["held"]) for r in scored),
        "n": len(scored),
        "rate": iv.estimate,
        "low": iv.low,
        "high": iv.high,
    }
    return {"rows": [r for r in rows if r.get("stage") in ("dev", "sealed")], "hit_rate": rates}


def write_summary(home: Home, run_id: str) -> dict[str, Any]:
    data = summary(home, run_id)
    path = home.people_dir(run_id) / "predictions_summary.json"
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return data
