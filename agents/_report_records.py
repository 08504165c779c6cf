"""The records of the run report: ``RunReport`` and its rows (people only, trust rule 9).

Everything the report says is rendered from one ``RunReport``: its sentences about what the run
did and did not do are derived from these fields, so a report cannot state what the records do
not hold. ``agents.report`` gathers them from the run's files; ``report.json`` is this record.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from agents._predictions import Calibration, HitRates
from agents.llm import LLMUsage
from agents.promotion import MilestoneFile
from audit import Finding
from segfactory.layout import DevPrediction, NotExecutableRow, SealedPrediction
from segfactory.records import ExpectedEffect
from segfactory.text import inert_tree

MAX_RUN_FINDINGS = 500  # listed in the report's record; past it: run_findings_truncated, the count kept


class _Rec(BaseModel):
    """A report record. Every string in it is made inert as it enters (hypotheses, reasons and
    changes are a model's or a sandbox's text), so no rendering of the report, and no terminal
    that prints it, receives their control characters."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _inert(cls, data: Any) -> Any:
        return inert_tree(data)


class TicketRow(_Rec):
    """One ticket as people see it: the hypothesis, the change, the host's numbers and the verdicts."""

    ticket_id: str
    arm: str
    kind: str
    replicate_of: str | None = None
    hypothesis: str
    change: dict[str, object]  # the ticket's change as it ran: shown as JSON, never interpreted
    status: str  # DONE | FAILED | REFUSED | not run
    reason: str | None = None
    device_seconds: float = 0.0
    dev_metrics: dict[str, float] = Field(default_factory=dict)
    best_dev_object_f1: float | None = None
    dev_win: bool | None = None
    verdict: str  # WIN | NO_WIN | INVALID | BUDGET_EXHAUSTED | DEV_LOSS | FAILED
    tier: str | None = None
    decision: str | None = None  # replicate | promote | reject | escalate (the judge), None: not judged
    decision_reason: str | None = None
    built_on: str | None = None  # sha256 of the model whose config it patched (None: no lineage row)
    built_on_ticket: str | None = None  # the promoted ticket that model came from (None: the base config)


class AuditSummary(_Rec):
    ok: bool
    records: int
    run_records: int
    head_seq: int | None
    anchor_seq: int | None
    unanchored_from: int | None
    problems: list[str]
    protected_read_attempts: int
    path_escape_attempts: int
    findings: int
    # this run's findings, each with its ticket, in log order (at most MAX_RUN_FINDINGS)
    run_findings: list[Finding] = Field(default_factory=list)
    run_findings_total: int = 0
    run_findings_truncated: bool = False
    held_for_findings: list[str] = Field(default_factory=list)  # tickets held for a person (audit)


class ApprovalRow(_Rec):
    """A data request this run made, or an earlier run's that this run took up."""

    id: str
    status: str  # pending | approved | denied
    hypothesis: str
    run_id: str  # the run that asked
    taken_by: str | None = None  # the run that queued it as a data ticket (None: none yet)
    decided_by: str | None = None
    reason: str | None = None


class SealedScore(_Rec):
    """One model's object F1 on the sealed tier, with its bootstrap interval."""

    sha256: str
    ticket_id: str | None  # the promoted ticket it came from; None: the classical detector
    estimate: float
    low: float
    high: float
    alpha: float | None = None  # the interval is two-sided 1 - alpha (None: the milestone did not say)
    n_images: int | None = None


class Headline(_Rec):
    """The outcome: the best's sealed score against the classical detector and the run's start."""

    best: SealedScore | None = None
    classical: SealedScore | None = None
    start: SealedScore | None = None  # the best when the run started, when scored
    start_sha256: str | None = None  # None: the run's first promotion does not name its parent
    promoted: list[str] = Field(default_factory=list)  # tickets this run promoted, in order
    tier_version: int | None = None
    missing: str | None = None  # why there is no sealed score of the best


class QueuedTicket(_Rec):
    """A ticket still in the queue when the run stopped."""

    id: str
    hypothesis: str


class RefusedDraft(_Rec):
    """A draft validation refused before it was queued (audit event ``ticket_invalid``)."""

    hypothesis: str
    kind: str
    reasons: list[str]


class TriedFix(_Rec):
    """One ticket tried on a round's best: the fix, its dev result and its prediction (people only)."""

    ticket_id: str
    hypothesis: str
    change: dict[str, object]  # the ticket's change as it ran: never interpreted here
    verdict: str
    dev_object_f1: float | None
    best_dev_object_f1: float | None
    predicted: ExpectedEffect | None  # the recommendation's predicted effect (None: no prediction)
    observed_change: float | None
    held: bool | None


class RoundRow(_Rec):
    """One analysis of a best: the weakness it named and every fix tried on that best."""

    round: int
    incumbent: str  # the best's sha256
    weakness: str
    tried: list[TriedFix]


class LabelRoundRow(_Rec):
    """A finished labelling round of the home (``agents.labelling.LabelRound``), as reports list it."""

    round: str
    reviewed: int
    kept: int
    fixed: int
    dropped: int
    precision: float | None
    human_minutes_per_image: float | None
    labels_per_hour: float | None
    dev_object_f1: float | None
    dev_gain: float | None
    gate_verdict: str | None
    status: str


class RetractionRow(_Rec):
    """A claim of the home that a challenge retracted (``agents.challenge.ChallengeRecord``)."""

    challenge_id: str
    ticket_id: str
    run_id: str
    claim: str  # the claim's kind
    reason: str
    demoted: bool


ScoredPrediction = Annotated[DevPrediction | SealedPrediction, Field(discriminator="stage")]


class PlanSpend(_Rec):
    """Where one phase of the budget plan put the device time: its written share and what it spent."""

    phase: str  # screen | rung | final
    share: float  # of the run's device budget, as policies/budget_plan.yaml writes it
    tickets: int  # the phase's tickets and their replicates
    device_seconds: float


class RunReport(_Rec):
    schema_version: int = 2  # 2: headline, lineage per ticket, approval rows, gate tiers
    run_id: str
    profile: str
    proposer: str
    backend: str
    base_config: str | None = (
        None  # the training config every ticket patched (None: a run before it was recorded)
    )
    sized_note: str = ""  # why a GPU-sized profile ran its CPU-sized config ("" when it did not)
    concurrency: int = 1  # tickets trained at once (run --concurrency)
    code_agent: bool = False  # run --code-agent: the code-editing agent wrote the code tickets' files
    fill_budget: bool = False  # an arm of `compare`: it stopped only on its budget
    gate_tiers: list[str] | None = None  # held-back tiers the gate listed at the run's end (None: not asked)
    stop_reason: str
    started_at: float | None
    ended_at: float
    win_rule_sha256: str | None
    headline: Headline = Field(
        default_factory=lambda: Headline(missing="no milestone was read for this report")
    )
    tickets: list[TicketRow]
    not_run: list[QueuedTicket]  # queued when the budget ran out
    approvals: list[ApprovalRow]
    counts: dict[str, int]
    device_seconds: float
    milestone: MilestoneFile | None  # the run's final milestone file (None: none was read)
    audit: AuditSummary | None
    llm_usage: LLMUsage
    analysis_dir: str | None
    plots: dict[str, str] = Field(default_factory=dict)
    label_rounds: list[LabelRoundRow] = Field(default_factory=list)  # the home's labelling rounds so far
    retractions: list[RetractionRow] = Field(default_factory=list)  # the home's retracted claims so far
    refused: list[RefusedDraft] = Field(default_factory=list)  # drafts validation refused before queueing
    rounds: list[RoundRow] = Field(default_factory=list)  # weakness, fixes tried on that best, results
    predictions: list[ScoredPrediction] = Field(
        default_factory=list
    )  # each executed recommendation: predicted, measured
    # recommendation vs default action, Wilson intervals; None (``{}`` in report.json): not scored
    hit_rate: HitRates | None = None
    # per rule: this run's predictions against what they measured, and the share it learnt
    calibration: list[Calibration] = Field(default_factory=list)
    budget_plan: list[PlanSpend] = Field(default_factory=list)  # empty: the run had no budget plan
    not_executable: list[NotExecutableRow] = Field(
        default_factory=list
    )  # recommendations that became no ticket

    @field_validator("hit_rate", mode="before")
    @classmethod
    def _unscored(cls, value: object) -> object:
        return None if value == {} else value

    @field_serializer("milestone")
    def _milestone_as_written(self, milestone: MilestoneFile | None) -> dict[str, object] | None:
        return None if milestone is None else milestone.as_json()  # the keys the gate set, as in its file

    @field_serializer("hit_rate")
    def _hit_rate_or_empty(self, rates: HitRates | None) -> dict[str, object]:
        return {} if rates is None else rates.model_dump(mode="json")

    @field_serializer("predictions", "not_executable")
    def _rows_as_written(
        self, rows: list[DevPrediction | SealedPrediction] | list[NotExecutableRow]
    ) -> list[dict[str, object]]:
        return [row.line() for row in rows]  # each ledger row with the keys its writer set


__all__ = [
    "ApprovalRow",
    "AuditSummary",
    "Headline",
    "LabelRoundRow",
    "QueuedTicket",
    "RefusedDraft",
    "RetractionRow",
    "RoundRow",
    "RunReport",
    "SealedScore",
    "TicketRow",
    "TriedFix",
]
