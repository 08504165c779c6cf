"""``segfactory sweep``: an Optuna study over ``policies/search_space.yaml``, at the agents' cost.

Every trial is a ``Ticket`` (arm ``sweep-tpe`` or ``sweep-random``) run through
``controls.pipeline.run_candidate``, the agents' own path: same data, runner, sandbox and
device-second accounting; only dev wins query the gate. The objective is the host-computed dev
object F1. Trial 0 is the base config itself (``enqueue_trial``). The study lives in the home's
``optuna.db`` (SQLite) or in a PostgreSQL URL; one study per run id.

``check_sweep`` validates everything (sampler, budget, space, storage) before anything is
created, so bad input leaves the home untouched.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

from agents.space import ParamValue, SearchSpace, default_params
from controls.pipeline import CandidateResult, CandidateServices, JudgeLike, run_candidate
from segfactory.errors import DataError, UsageError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind

log = logging.getLogger(__name__)

SAMPLERS = {"tpe": Arm.SWEEP_TPE, "random": Arm.SWEEP_RANDOM}
OPTUNA_DB = "optuna.db"  # under the home: the default study storage
TRIALS_FILE = "sweep.jsonl"  # people/: one row per trial (dev score, device-seconds, verdicts)
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: what ``run_sweep`` needs besides the services."""

    sampler: str
    budget_s: float  # device-seconds for the whole sweep, replicates included
    seed: int
    storage: str  # an SQLAlchemy URL
    space: SearchSpace
    defaults: dict[str, ParamValue]  # the base config's values: trial 0
    ticket_budget: Budget

    @property
    def arm(self) -> Arm:
        return SAMPLERS[self.sampler]


def storage_url(home_root: Path, storage: str | None) -> str:
    """The home's ``optuna.db`` unless a PostgreSQL (or SQLite) URL is given."""
    if storage is None:
        return f"sqlite:///{home_root / OPTUNA_DB}"
    if not storage.startswith(("postgresql://", "postgresql+psycopg2://", "sqlite:///")):
        raise UsageError(f"--storage {storage!r}: expected a postgresql:// or sqlite:/// URL")
    return storage


def _check_sqlite(url: str) -> None:
    """A present SQLite file must be a healthy database (else DataError; nothing is touched)."""
    path = Path(url.removeprefix("sqlite:///"))
    if not path.exists():
        return
    with path.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise DataError(
            f"the Optuna database {path} is not an SQLite file (corrupted?); move it aside "
            "or pass another --storage"
        )
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise DataError(
            f"the Optuna database {path} is corrupted ({exc}); move it aside or pass another --storage"
        ) from None
    if ok != "ok":
        raise DataError(f"the Optuna database {path} fails its integrity check ({ok}); move it aside")


def check_sweep(
    sampler: str,
    budget_s: float,
    seed: int,
    storage: str,
    space: SearchSpace,
    base_config: dict[str, JsonValue],
    ticket_budget: Budget,
) -> SweepPlan:
    """Validate a sweep before anything runs; raises UsageError, PolicyError or DataError."""
    if sampler not in SAMPLERS:
        raise UsageError(f"sampler {sampler!r} is not registered; known: {', '.join(sorted(SAMPLERS))}")
    if budget_s < ticket_budget.device_seconds:
        raise UsageError(
            f"--budget {budget_s:g} s is too small for one trial ({ticket_budget.device_seconds:g} "
            "device-seconds per ticket); ask for at least that"
        )
    if storage.startswith("sqlite:///"):
        _check_sqlite(storage)
    defaults = default_params(space, base_config)
    return SweepPlan(sampler, budget_s, seed, storage, space, defaults, ticket_budget)


def make_sampler(name: str, seed: int) -> Any:
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def open_study(plan: SweepPlan, study_name: str) -> Any:
    """Create the run's study (trial 0 enqueued: the default config); DataError if storage fails."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            study_name=study_name,
            storage=plan.storage,
            direction="maximize",
            sampler=make_sampler(plan.sampler, plan.seed),
            load_if_exists=False,
        )
    except optuna.exceptions.DuplicatedStudyError:
        raise UsageError(
            f"a study {study_name!r} already exists in {plan.storage}; use a new run id"
        ) from None
    except Exception as exc:  # sqlalchemy errors: unreachable server, bad schema, corrupted file
        raise DataError(f"cannot open the Optuna storage {plan.storage}: {exc}") from None
    study.enqueue_trial(plan.defaults)
    return study


class SweepSummary(BaseModel):
    """One sweep as ``segfactory sweep --json`` reports it (and ``people/<run>/sweep.json`` keeps it)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    study_name: str
    trials: int
    device_seconds: float
    dev_wins: int
    confirm_a_wins: int
    promoted: int
    failed: int
    best_dev_score: float | None
    best_ticket: str | None
    best_params: dict[str, ParamValue] | None
    # set by controls.arms.run_sweep_arm, which knows how the sweep was asked for
    sampler: str | None = None
    seed: int | None = None
    budget_s: float | None = None
    storage: str | None = None

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json", exclude_unset=True)


@dataclass(frozen=True)
class TrialRow:
    """One trial of the sweep: its number, its parameters, the device-seconds spent so far and what
    its candidate did (people only: it holds the dev score)."""

    trial: int
    params: dict[str, ParamValue]
    cumulative_device_seconds: float
    candidate: CandidateResult

    def line(self) -> dict[str, object]:
        """The trial's line of ``people/sweep.jsonl``: the candidate's fields beside the trial's."""
        return {
            "trial": self.trial,
            "params": self.params,
            "cumulative_device_seconds": self.cumulative_device_seconds,
            **self.candidate.model_dump(mode="json"),
        }


@dataclass
class SweepResult:
    run_id: str
    study_name: str
    rows: list[TrialRow] = field(default_factory=list)  # every trial, in order
    device_seconds: float = 0.0

    @property
    def trials(self) -> list[dict[str, object]]:
        """Every trial as ``people/sweep.jsonl`` holds it (its line), in order."""
        return [row.line() for row in self.rows]

    def summary(self) -> SweepSummary:
        runs = [t.candidate for t in self.rows]
        scored = [t for t in self.rows if t.candidate.dev_score is not None]
        best = max(scored, key=_dev_score) if scored else None
        return SweepSummary(
            run_id=self.run_id,
            study_name=self.study_name,
            trials=len(self.rows),
            device_seconds=self.device_seconds,
            dev_wins=sum(c.status == "dev_win" for c in runs),
            confirm_a_wins=sum(c.confirm_a == "WIN" for c in runs),
            promoted=sum(c.decision == "promote" for c in runs),
            failed=sum(c.status == "failed" for c in runs),
            best_dev_score=best.candidate.dev_score if best else None,
            best_ticket=best.candidate.ticket_id if best else None,
            best_params=best.params if best else None,
        )


def _dev_score(trial: TrialRow) -> float:
    score = trial.candidate.dev_score
    assert score is not None, "only scored trials are compared"
    return score


def trial_ticket(
    plan: SweepPlan, run_id: str, number: int, params: dict[str, ParamValue], seed: int
) -> Ticket:
    return Ticket(
        id=f"{run_id}-t{number:03d}",
        arm=plan.arm,
        kind=TicketKind.CONFIG,
        change=dict(params),
        hypothesis=f"{plan.arm.value} trial {number}: " + json.dumps(params, sort_keys=True),
        budget=plan.ticket_budget,
        seed=seed,
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
    )


def run_sweep(
    plan: SweepPlan,
    services: CandidateServices,
    judge: JudgeLike,
    *,
    run_id: str,
    make_seed: Callable[[], int],
    people: Path | None = None,
    max_trials: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> SweepResult:
    """Ask, run, tell until the device-seconds are spent (the last trial may run past, as for the agents).

    ``max_trials`` stops earlier, after that many trials (benchmarks and tests).
    """
    import optuna

    study_name = f"{run_id}-{plan.arm.value}"
    study = open_study(plan, study_name)
    result = SweepResult(run_id=run_id, study_name=study_name)
    while result.device_seconds < plan.budget_s and (max_trials is None or len(result.rows) < max_trials):
        trial = study.ask()
        params = plan.space.suggest(trial)
        candidate = run_candidate(
            services, judge, trial_ticket(plan, run_id, trial.number, params, make_seed()), make_seed
        )
        if candidate.dev_score is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, candidate.dev_score)
        result.device_seconds += candidate.device_seconds
        result.rows.append(TrialRow(trial.number, params, result.device_seconds, candidate))
        _append(people, result.rows[-1])
        progress(
            f"trial {trial.number}: dev {candidate.dev_score} ({candidate.status}, {candidate.decision}); "
            f"{result.device_seconds:.0f}/{plan.budget_s:.0f} device-s"
        )
    return result


def _append(people: Path | None, row: TrialRow) -> None:
    if people is None:
        return
    people.mkdir(parents=True, exist_ok=True)
    with (people / TRIALS_FILE).open("a") as fh:
        fh.write(json.dumps(row.line(), sort_keys=True) + "\n")


__all__ = [
    "OPTUNA_DB",
    "SAMPLERS",
    "SweepPlan",
    "SweepResult",
    "TrialRow",
    "check_sweep",
    "run_sweep",
    "storage_url",
]
