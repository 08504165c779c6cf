"""Hit-rate bookkeeping: did recommendations hold up, and did they beat the default action?

After a milestone scores a recommendation's ticket, ``mark`` records whether the predicted
effect held. The same is recorded for the default action at equal cost (re-running the current
best with a new seed), so ``summary`` can compare both hit rates, each with a Wilson interval.
Outcomes are for people only: they live under ``runs/<id>/people/`` (trust rule 9) and nothing
here is ever put in an agent's context.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from segfactory.errors import UsageError
from segfactory.home import Home
from segfactory.records import Direction, ExpectedEffect
from segfactory.stats import wilson_interval

OUTCOMES_FILE = "hitrate.jsonl"
SUMMARY_FILE = "hitrate_summary.json"
HELD_SHARE = 0.5  # a prediction holds if the observed change goes its way by >= this share of its size
Arm = Literal["recommendation", "default"]


class HitOutcome(BaseModel):
    """One scored prediction: which recommendation (or default re-run), its ticket, held or not."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    run_id: str
    arm: Arm
    recommendation_id: str
    ticket_id: str
    predicted: ExpectedEffect
    observed_change: float  # candidate minus current best on the predicted metric and slice
    held: bool
    ts: float = Field(default_factory=time.time)


class ArmRate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    held: int
    n: int
    rate: float
    low: float
    high: float


class HitRateSummary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    run_id: str
    recommendation: ArmRate
    default: ArmRate


def held(predicted: ExpectedEffect, observed_change: float) -> bool:
    """True if the change went the predicted way by at least HELD_SHARE of the predicted size.

    A "none" prediction (leave it) holds when the change stays within the predicted size.
    """
    if predicted.direction == Direction.NONE:
        return abs(observed_change) <= max(predicted.size, 1e-9)
    signed = observed_change if predicted.direction == Direction.UP else -observed_change
    return signed > 0 and signed >= HELD_SHARE * predicted.size


def _people(home: Home, run_id: str) -> Path:
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise UsageError(f"run id {run_id!r} is not a plain name")
    folder = home.people_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def mark(
    home: Home,
    run_id: str,
    *,
    arm: Arm,
    recommendation_id: str,
    ticket_id: str,
    predicted: ExpectedEffect,
    observed_change: float,
) -> HitOutcome:
    """Record one scored prediction under ``runs/<run_id>/people/`` and return it."""
    outcome = HitOutcome(
        run_id=run_id,
        arm=arm,
        recommendation_id=recommendation_id,
        ticket_id=ticket_id,
        predicted=predicted,
        observed_change=observed_change,
        held=held(predicted, observed_change),
    )
    with open(_people(home, run_id) / OUTCOMES_FILE, "a", encoding="utf-8") as handle:
        handle.write(outcome.model_dump_json() + "\n")
    return outcome


def outcomes(home: Home, run_id: str) -> list[HitOutcome]:
    path = home.people_dir(run_id) / OUTCOMES_FILE
    if not path.is_file():
        return []
    return [HitOutcome.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def _rate(rows: list[HitOutcome]) -> ArmRate:
    k = sum(r.held for r in rows)
    iv = wilson_interval(k, len(rows))
    return ArmRate(held=k, n=len(rows), rate=iv.estimate, low=iv.low, high=iv.high)


def summary(home: Home, run_id: str) -> HitRateSummary:
    """Both hit rates with Wilson intervals; also written to ``people/hitrate_summary.json``."""
    rows = outcomes(home, run_id)
    result = HitRateSummary(
        run_id=run_id,
        recommendation=_rate([r for r in rows if r.arm == "recommendation"]),
        default=_rate([r for r in rows if r.arm == "default"]),
    )
    (_people(home, run_id) / SUMMARY_FILE).write_text(json.dumps(result.model_dump(), indent=2) + "\n")
    return result
