"""The records of a challenge: the claim under test, the conditions diffed, and the verdict.

A claim is what a ticket's records say: a win (promoted, or a dev win) or a finding such as a
robustness collapse. A finding is written as ``runs/<run>/people/claims/<ticket>.json`` (a
:class:`Claim`); :func:`collapse_claim` makes one from an ``evaluate --robustness`` report.
The verdict goes to ``runs/<run>/people/challenges/<challenge id>.json`` (a
:class:`ChallengeRecord`), people only.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

if TYPE_CHECKING:
    from vision.evaluate import EvalReport

SCHEMA_VERSION: Literal[1] = 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClaimKind(StrEnum):
    WIN = "win"  # the ticket's model beats the reference (a promotion or a dev win)
    COLLAPSE = "collapse"  # the ticket's model collapses under a perturbation (a "vulnerability")


class Claim(Strict):
    """A claimed result of one ticket. For a collapse: the perturbation cell and its drop."""

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: ClaimKind
    ticket_id: str
    run_id: str
    source: str  # where the claim was read: promotions.jsonl, dev_comparisons.jsonl, claims/<id>.json
    metric: str = "object_f1"
    claimed: float  # the claimed value: the candidate's dev object F1, or the collapsed object F1
    reference: float  # what it is compared with: the best's dev object F1, or the clean object F1
    perturbation: str | None = None  # collapse only: vision.perturb name, severity and value
    severity: int | None = Field(default=None, ge=1, le=5)
    value: float | None = None
    promoted: bool = False  # a win the gate promoted (the model may be the current best)
    model_sha256: str | None = None

    @property
    def effect(self) -> float:
        """Improvement (win) or drop (collapse); positive when the claim says something happened."""
        return self.claimed - self.reference if self.kind is ClaimKind.WIN else self.reference - self.claimed


class Verdict(StrEnum):
    UPHELD = "upheld"
    RETRACTED = "retracted"


class Condition(Strict):
    """One training/evaluation condition as the host recorded it."""

    label: str  # "claimed", "rederived-<seed>", "full-range control"
    ticket_id: str
    seed: int
    dataset: str  # dataset version ref
    dataset_hash: str
    code_sha256: str  # the training code the host gave the worker: its vision/ with the ticket's files
    config_sha256: str
    augment: dict[str, JsonValue]  # the augmentation ranges trained with (the config's ``augment``)
    dev_object_f1: float | None = None
    perturbed_object_f1: float | None = None  # collapse claims: at the claimed cell


class RangeCheck(Strict):
    """Did the evaluation run inside the range that training covered?"""

    perturbation: str
    severity: int
    value: float
    augment_field: str | None  # None: no augmentation covers this perturbation
    trained_low: float | None
    trained_high: float | None
    within_training_range: bool


class ChallengeRecord(Strict):
    """The verdict on one claim, with its reasons; people only."""

    schema_version: Literal[1] = SCHEMA_VERSION
    challenge_id: str
    created: float = Field(default_factory=time.time)
    claim: Claim
    seeds: list[int]  # host-chosen (os.urandom)
    conditions: list[Condition]
    diff: dict[str, list[Any]]  # field -> the distinct values across conditions (only fields that varied)
    range_checks: list[RangeCheck]
    verdict: Verdict
    reasons: list[str]
    demoted: bool = False  # the gate's best moved back (a retracted win that was the current best)
    demoted_to: str | None = None  # sha256 of the model the best moved back to
    device_seconds: float = 0.0


def collapse_claim(
    report: EvalReport,
    ticket_id: str,
    run_id: str,
    perturbation: str | None = None,
    severity: int | None = None,
) -> Claim | None:
    """The worst collapsed cell of an ``evaluate --robustness`` report as a claim (None: no collapse),
    optionally only among the cells of one perturbation (and one severity)."""
    cells = [
        c
        for c in (report.robustness.cells if report.robustness is not None else [])
        if c.finding in {"vulnerability", "extrapolation"}
        and perturbation in (None, c.perturbation)
        and severity in (None, c.severity)
    ]
    if not cells:
        return None
    worst = max(cells, key=lambda c: c.object_f1_drop)
    return Claim(
        kind=ClaimKind.COLLAPSE,
        ticket_id=ticket_id,
        run_id=run_id,
        source="evaluate --robustness",
        claimed=worst.object_f1,
        reference=report.metrics["object_f1"],
        perturbation=worst.perturbation,
        severity=worst.severity,
        value=float(worst.value),
    )
