"""Every file under a home's ``runs/``: where it lies and the typed row it holds.

Like nnU-Net's ``paths.py``, this is the one module that joins paths under ``runs/``; everyone
else asks it. The rows of the run's ledgers are records here too, so a file is written and read
with one type (a row from an older home that lacks a newer field gets that field's default).

```
runs/promotions.jsonl                 Promotion: every model that became the gate's best (all runs)
runs/baseline/baseline-classical.onnx the classical baseline `init` registers as the first best
runs/<run>/run.json                   what the run was started with (agents.run.RunRecord)
runs/<run>/lineage.jsonl              Lineage: one row per started ticket (no score)
runs/<run>/llm_usage.json             LLM totals, carried over a resume
runs/<run>/analysis/<sha[:12]>/       the analysis of one best on dev
runs/<run>/topups/<ticket>/           a data ticket's top-up version (dataset.json names it)
runs/<run>/approved/<request>/        the version an approved data request trains on
runs/<run>/tickets/<id>/              one ticket's folder (TicketFiles); .crashed/ holds set-aside ones
runs/<run>/people/                    for people only: never in an agent's context or workspace
    tickets.jsonl                     Ticket: every ticket as it started
    dev_comparisons.jsonl             DevComparison: candidate against the best on dev
    not_executable.jsonl              NotExecutableRow: recommendations that became no ticket
    predictions.jsonl                 PredictionRow: predicted effects, scored on dev then sealed
    milestones/<name>.json            the gate's milestone reports
    report.{md,html,json}             the morning report
```
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from segfactory.budgets import RunCaps
from segfactory.errors import UsageError
from segfactory.files import append_jsonl, read_jsonl, write_atomic
from segfactory.home import Home
from segfactory.records import ConcurrencyPlan, ExpectedEffect, InitFrom, MemberModel, Ticket, sha256_file

BASELINE_MODEL = Path("runs") / "baseline" / "baseline-classical.onnx"  # under the home; written by init
PROMOTIONS = "promotions.jsonl"
RepeatKind = Literal["base", "replicate", "aa", "challenge", "default-action"]
BestMove = Literal["promotion", "reference", "restore"]


class Row(BaseModel):
    """A line of one of the run's ledgers: no unknown fields, immutable.

    A line holds the fields its writer set (and those a file it was read from had): a key that
    applies only in some cases (a prediction's ``reason``) is absent rather than empty.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    def line(self) -> dict[str, object]:
        full = self.model_dump(mode="json")
        return {key: value for key, value in full.items() if key in self.model_fields_set}


class RunRecord(Row):
    """``runs/<run>/run.json``: what a run (or a control session) was started with. A resumed run
    reads it back and keeps it: its proposer, judge, caps, seed and base config."""

    run_id: str
    kind: str = "run"  # a control session names itself: sweep, aa, nnunet, topup, ...
    profile: str
    backend: str
    win_rule_sha256: str
    started_at: float
    user: str
    concurrency: int = 1  # what the run trains at once (auto resolved at start)
    concurrency_requested: int | str | None = None  # --concurrency as given: a number or "auto"
    concurrency_plan: ConcurrencyPlan | None = None  # how auto was resolved (None: a number was given)
    proposer: str = "rules"
    caps: RunCaps | None = None  # an agent run's caps (budgets.yaml, tightened by run.yaml and flags)
    judge: str | None = None
    code_agent: bool = False
    fill_budget: bool = False  # a compare arm: stop only on the budget, as a sweep does
    base_config: str | None = None  # the training config every ticket patched
    sized_note: str = ""  # why a GPU-sized profile ran its CPU-sized config
    seed: int | None = None  # run --seed: the host seeds' generator (None: os.urandom)
    finished_at: float | None = None


class Lineage(Row):
    """One started ticket: what it built on and what it trained (no score)."""

    ticket_id: str
    run_id: str
    parent_sha256: str
    parent_fingerprint: str
    config: dict[str, Any]
    dataset: str
    dataset_hash: str
    code: dict[str, str] = Field(default_factory=dict)
    fingerprint: str
    repeat: RepeatKind | None = None
    init_from: InitFrom | None = None  # the trained weights it starts from (host-planned, by hash)
    members: list[MemberModel] = Field(default_factory=list)  # a packaging ticket's models (by hash)


class Promotion(Row):
    """A model that became the gate's best, with the lineage it trained from.

    ``kind``: ``promotion`` (both WINs, the judge's PROMOTE), ``reference`` (an A/A reference set
    through the gate's host surface) or ``restore`` (compare putting its incumbent back between
    arms). Only a promotion carries a training config for the next ticket to patch.
    """

    model: str  # the host's copy
    sha256: str
    run_id: str
    ticket_id: str
    kind: BestMove = "promotion"
    config: dict[str, Any] | None = None
    dataset: str | None = None
    dataset_hash: str = ""
    code: dict[str, str] = Field(default_factory=dict)
    fingerprint: str = ""
    parent_sha256: str = ""
    reason: str = ""
    checkpoint_sha256: str = ""  # its copied-out weights, for tickets that continue from it ("": none)
    init_from: InitFrom | None = None  # the weights it itself started from

    @model_validator(mode="before")
    @classmethod
    def _older_rows(cls, data: Any) -> Any:
        """Rows written before ``kind`` existed: compare's restores said ``restored``, and an A/A
        reference was a row without a config whose ticket id ends in ``-ref``."""
        if not isinstance(data, dict) or "kind" in data:
            return data
        data = dict(data)
        if data.pop("restored", False):
            data["kind"] = "restore"
        elif not data.get("config") and str(data.get("ticket_id", "")).endswith("-ref"):
            data["kind"] = "reference"
        return data


class PlanRow(Row):
    """A ticket the budget plan placed (``runs/<run>/budget_plan.jsonl``): its phase, its level
    (screens 0, each rung one deeper, the final last), the budget it was given, what it continues."""

    ticket_id: str
    phase: Literal["screen", "rung", "final", "package"]
    level: int = Field(ge=0)
    budget_s: float = Field(gt=0)
    continues: str | None = None
    members: list[str] = Field(default_factory=list)  # a packaging ticket's tickets, best first


class DevComparison(Row):
    """A ticket's host-computed dev score against the current best's (people only)."""

    ticket_id: str
    object_f1: float
    best_object_f1: float
    best_sha256: str
    dev_margin: float
    dev_win: bool
    metrics: dict[str, float]
    threshold: float
    parent_sha256: str


class NotExecutableRow(Row):
    """A recommendation that became no ticket, why, and on which incumbent."""

    rule: str
    recommendation_id: str
    reason: str
    incumbent: str = ""


class DefaultOutcome(Row):
    """The round's default-action control measured on a recommendation's predicted effect."""

    ticket_id: str
    observed_change: float
    held: bool


class DevPrediction(Row):
    """A recommendation's predicted effect measured on dev: the candidate against its parent."""

    stage: Literal["dev"] = "dev"
    ticket_id: str
    recommendation_id: str
    parent_sha256: str
    predicted: ExpectedEffect
    change: dict[str, Any]
    candidate: float | None = None
    parent: float | None = None
    observed_change: float | None = None
    held: bool | None = None
    n: int = 0
    default: DefaultOutcome | None = None
    reason: str = ""  # present when the effect cannot be measured on dev
    rule: str | None = None  # the recommendation rule (its id without the index)
    # the share of the recommendation's shortfall the change recovered (what its next prediction learns)
    realised_share: float | None = None


class ControlPrediction(Row):
    """A round's default-action control finished: the model the round's predictions compare with."""

    stage: Literal["control"] = "control"
    ticket_id: str
    parent_sha256: str
    model: str


class DefaultPrediction(Row):
    """The control's outcome for a dev prediction scored before the control had finished."""

    stage: Literal["default"] = "default"
    ticket_id: str
    control: DefaultOutcome | None


class SealedPrediction(Row):
    """A promoted recommendation's predicted effect measured on the sealed tier (people only)."""

    stage: Literal["sealed"] = "sealed"
    ticket_id: str
    recommendation_id: str
    predicted: ExpectedEffect
    observed_change: float | None = None
    held: bool | None = None
    reason: str = ""


PredictionRow = Annotated[
    DevPrediction | ControlPrediction | DefaultPrediction | SealedPrediction, Field(discriminator="stage")
]
_PREDICTION = TypeAdapter(PredictionRow)


@dataclass(frozen=True)
class TicketFiles:
    """One ticket's folder: what the host writes beside the sandbox's ``work/``."""

    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model.onnx"

    @property
    def outcome(self) -> Path:
        return self.root / "outcome.json"

    @property
    def host_config(self) -> Path:
        return self.root / "host_config.yaml"

    @property
    def work(self) -> Path:
        """The sandbox's workspace; removed once a ticket is done and copied out."""
        return self.root / "work"

    @property
    def curve(self) -> Path:
        """The worker's learning curve, copied out of ``work/`` (people's plot, never evidence)."""
        return self.root / "learning_curve.jsonl"


@dataclass(frozen=True)
class RunLayout:
    """The paths and ledgers of one run under ``runs/<run_id>/``. Touches nothing on disk until a
    ledger is appended to."""

    home: Home
    run_id: str

    @property
    def root(self) -> Path:
        return self.home.runs / self.run_id

    @property
    def run_record(self) -> Path:
        return self.root / "run.json"

    @property
    def llm_usage(self) -> Path:
        return self.root / "llm_usage.json"

    @property
    def search_db(self) -> Path:
        """The explorer's Optuna study of this run (its trials' dev scores: host-side only)."""
        return self.root / "search.db"

    def plan_rows(self) -> list[PlanRow]:
        return [PlanRow.model_validate(r) for r in read_jsonl(self.root / "budget_plan.jsonl")]

    def append_plan_row(self, row: PlanRow) -> None:
        append_jsonl(self.root / "budget_plan.jsonl", row.line())

    def analysis_dir(self, best_sha256: str) -> Path:
        return self.root / "analysis" / best_sha256[:12]

    def analysis_reports(self) -> list[Path]:
        return sorted((self.root / "analysis").glob("*/report.json"))

    def topup_dir(self, ticket_id: str) -> Path:
        return self.root / "topups" / ticket_id

    def approved_dir(self, request_id: str) -> Path:
        return self.root / "approved" / request_id

    @property
    def tickets(self) -> Path:
        return self.root / "tickets"

    def ticket(self, ticket_id: str) -> TicketFiles:
        return TicketFiles(self.tickets / ticket_id)

    @property
    def crashed(self) -> Path:
        return self.tickets / ".crashed"

    def read_record(self) -> RunRecord:
        if not self.run_record.is_file():
            raise UsageError(f"no run {self.run_id!r} in {self.home.runs}; see the run ids there")
        return RunRecord.model_validate_json(self.run_record.read_text())

    def write_record(self, record: RunRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.run_record, json.dumps(record.line(), indent=2, sort_keys=True))

    # -- people only ------------------------------------------------------------------------
    @property
    def people(self) -> Path:
        return self.root / "people"

    @property
    def milestones(self) -> Path:
        return self.people / "milestones"

    def milestone(self, name: str) -> Path:
        return self.milestones / f"{name}.json"

    def report(self, suffix: Literal["md", "html", "json"]) -> Path:
        return self.people / f"report.{suffix}"

    @property
    def predictions_file(self) -> Path:
        return self.people / "predictions.jsonl"

    @property
    def predictions_summary(self) -> Path:
        return self.people / "predictions_summary.json"

    # -- the ledgers --------------------------------------------------------------------------
    def lineage(self) -> dict[str, Lineage]:
        return {r["ticket_id"]: Lineage.model_validate(r) for r in read_jsonl(self.root / "lineage.jsonl")}

    def append_lineage(self, row: Lineage) -> None:
        append_jsonl(self.root / "lineage.jsonl", row.line())

    def started(self) -> list[Ticket]:
        """Every ticket as it started, in order (a ticket restarted after a crash appears again)."""
        return [Ticket.model_validate(r) for r in read_jsonl(self.people / "tickets.jsonl")]

    def append_started(self, ticket: Ticket) -> None:
        append_jsonl(self.people / "tickets.jsonl", ticket.model_dump(mode="json"))

    def dev_comparisons(self) -> list[DevComparison]:
        return [DevComparison.model_validate(r) for r in read_jsonl(self.people / "dev_comparisons.jsonl")]

    def append_dev_comparison(self, row: DevComparison) -> None:
        append_jsonl(self.people / "dev_comparisons.jsonl", row.line())

    def not_executable(self) -> list[NotExecutableRow]:
        return [NotExecutableRow.model_validate(r) for r in read_jsonl(self.people / "not_executable.jsonl")]

    def append_not_executable(self, row: NotExecutableRow) -> None:
        append_jsonl(self.people / "not_executable.jsonl", row.line())

    def predictions(self) -> list[DevPrediction | ControlPrediction | DefaultPrediction | SealedPrediction]:
        return [_PREDICTION.validate_python(r) for r in read_jsonl(self.predictions_file)]

    def append_prediction(self, row: Row) -> None:
        append_jsonl(self.predictions_file, row.line())


@dataclass(frozen=True)
class RunsLayout:
    """What lies under ``runs/`` across runs: the promotions ledger and the classical baseline."""

    home: Home

    @property
    def baseline_model(self) -> Path:
        return self.home.root / BASELINE_MODEL

    @property
    def promotions_file(self) -> Path:
        return self.home.runs / PROMOTIONS

    def run(self, run_id: str) -> RunLayout:
        return RunLayout(self.home, run_id)

    def promotions(self) -> list[Promotion]:
        return [Promotion.model_validate(r) for r in read_jsonl(self.promotions_file)]

    def append_promotion(self, row: Promotion) -> None:
        append_jsonl(self.promotions_file, row.line())

    def host_copy(self, sha256: str) -> Path | None:
        """The host's copy of a model that was the gate's best: the newest promotions row with that
        hash whose file is there, else the classical baseline if it has that hash."""
        for row in reversed(self.promotions()):
            if row.sha256 == sha256 and Path(row.model).is_file():
                return Path(row.model)
        baseline = self.baseline_model
        if baseline.is_file() and sha256_file(baseline) == sha256:
            return baseline
        return None


__all__ = [
    "BASELINE_MODEL",
    "BestMove",
    "ControlPrediction",
    "DefaultOutcome",
    "DefaultPrediction",
    "DevComparison",
    "DevPrediction",
    "Lineage",
    "NotExecutableRow",
    "PlanRow",
    "PredictionRow",
    "Promotion",
    "RepeatKind",
    "Row",
    "RunLayout",
    "RunRecord",
    "RunsLayout",
    "SealedPrediction",
    "TicketFiles",
]
