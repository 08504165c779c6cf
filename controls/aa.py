"""``segfactory aa``: A/A runs, where every win is false by construction.

Two kinds of run, each against a reference of its own kind:

- **fresh**: a reference ticket trains the default config and becomes the current best (a
  recorded move with its reason). Then tickets train the *same* config with fresh host-chosen
  seeds; every other one is a ``code`` ticket whose only edit is a comment appended to a
  training module, so the code path is exercised too.
- **continued**: the kind of ticket a budget plan's rungs and final are. One continuation of the
  fresh reference's weights (its recipe, unchanged, trained on as many epochs as its budget
  holds) under one seed becomes the current best; then the *same* continuation, from the same
  parent weights, under fresh seeds. Every candidate names the fresh reference's ticket as the
  weights it continues (never "the incumbent", which by then is the continuation reference), so
  the candidates and their reference share one fingerprint.

Each candidate goes through ``run_candidate``, the agents' own path. Nothing differs but noise,
so any win (of the gate's rule, or of a naive "best dev score wins" rule on the same runs) is
false.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agents.budget_plan import load_plan
from controls.pipeline import CandidateResult, CandidateServices, JudgeLike, run_candidate
from controls.rates import RateRecord, false_win_rate, rate, selection_effect
from controls.replay import Replay
from segfactory.budgets import ticket_caps
from segfactory.errors import DataError
from segfactory.home import SOURCE_ROOT
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind

NOOP_FILE = "vision/train.py"  # the module a no-op code edit touches (imported by every training run)


def noop_edit(index: int, source: Path = SOURCE_ROOT / NOOP_FILE) -> dict[str, str]:
    """A code change that changes nothing: a comment (odd) or trailing whitespace (even)."""
    text = source.read_text()
    tail = f"\n# A/A no-op edit {index}: this comment changes nothing\n" if index % 4 == 1 else "\n\n   \n"
    return {NOOP_FILE: text + tail}


def aa_ticket(run_id: str, index: int, budget: Budget, seed: int) -> Ticket:
    code = index % 2 == 1
    change: dict[str, object] = {"files": noop_edit(index), "config": {}} if code else {}
    return Ticket(
        id=f"{run_id}-aa{index:03d}",
        arm=Arm.AA,
        kind=TicketKind.CODE if code else TicketKind.CONFIG,
        change=change,
        budget=budget,
        seed=seed,
        hypothesis=f"A/A run {index}: the default config, a new seed"
        + (", a no-op code edit" if code else ""),
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
    )


def continuation_ticket(run_id: str, index: int | None, budget: Budget, seed: int, parent: str) -> Ticket:
    """The continuation of ``parent``'s weights (its recipe unchanged): the reference when
    ``index`` is None, else A/A candidate ``index``. ``budget.epochs`` above the recipe's makes it
    trained as long as its device budget holds, as a budget plan's rung is."""
    what = "reference" if index is None else f"run {index}"
    return Ticket(
        id=f"{run_id}-cref" if index is None else f"{run_id}-ct{index:03d}",
        arm=Arm.AA,
        kind=TicketKind.CONFIG,
        change={},
        budget=budget,
        seed=seed,
        continues=parent,
        hypothesis=f"A/A continued {what}: {parent}'s weights trained on, recipe unchanged"
        + (", a new seed" if index is not None else "; it becomes the current best"),
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
    )


def continuation_budget(profile: str, ticket: Budget) -> Budget:
    """What one A/A continuation may spend: a budget plan rung's device-seconds where the profile
    has a plan (else the profile's ``ticket`` budget), with epochs at the profile's cap, so that
    it trains as many epochs as its budget holds, as a rung does."""
    plan = load_plan(profile)
    seconds = plan.rungs.ticket_s if plan is not None else ticket.device_seconds
    return Budget(device_seconds=seconds, epochs=ticket_caps(profile).max_epochs)


def reference_ticket(run_id: str, budget: Budget, seed: int) -> Ticket:
    return Ticket(
        id=f"{run_id}-ref",
        arm=Arm.AA,
        kind=TicketKind.CONFIG,
        change={},
        budget=budget,
        seed=seed,
        hypothesis="A/A reference: the default config; it becomes the current best",
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
    )


@dataclass
class AAResult:
    """The runs of one A/A: ``runs`` against the fresh reference, ``continued`` against the
    continuation reference (empty when none was asked for)."""

    run_id: str
    reference_dev_score: float
    runs: list[CandidateResult] = field(default_factory=list)
    continued: list[CandidateResult] = field(default_factory=list)
    continuation_dev_score: float | None = None

    def summary(self) -> AaSummary:
        """The rates over the runs that reached a decision: a run that failed to train, or whose
        replicate failed after a confirm-a WIN, could not win, and counting it as a non-win would
        make the false-win rate look better than it is. ``failed`` and ``undecided`` say how many.

        The top-level rates count both kinds; ``kinds`` gives each kind's alone, its naive rule
        judged against its own reference. ``selection_effect`` is the fresh runs' (their scores
        share one mean), else the continued runs'.
        """
        every = self.runs + self.continued
        kinds = {
            name: _kind(rows, ref)
            for name, rows, ref in (
                ("fresh", self.runs, self.reference_dev_score),
                ("continued", self.continued, self.continuation_dev_score),
            )
            if rows and ref is not None
        }
        decided = [r for r in every if _decided(r)]
        scores = [r.dev_score for r in (self.runs or self.continued) if r.dev_score is not None]
        return AaSummary(
            run_id=self.run_id,
            runs=len(every),
            failed=sum(r.status == "failed" for r in every),
            undecided=sum(r.status != "failed" and r.replicate_status == "failed" for r in every),
            reference_dev_score=self.reference_dev_score,
            device_seconds=sum(r.device_seconds for r in every),
            dev_wins=sum(r.status == "dev_win" for r in every),
            confirm_a_wins=sum(r.confirm_a is not None and r.confirm_a.value == "WIN" for r in every),
            replicates=sum(r.replicate_id is not None for r in every),
            confirm_b_queries=sum(r.confirm_b is not None for r in every),
            gate_rule=_rule(sum(r.promoted for r in decided), len(decided)),
            naive_rule=_rule(
                sum(k.naive_rule.wins for k in kinds.values()), sum(k.naive_rule.runs for k in kinds.values())
            ),
            selection_effect=selection_effect(scores).as_dict() if scores else None,
            continued=len(self.continued),
            continuation_dev_score=self.continuation_dev_score,
            kinds=kinds,
        )


def _decided(run: CandidateResult) -> bool:
    return run.status != "failed" and run.replicate_status != "failed"


class RuleRates(BaseModel):
    """One decision rule over the A/A runs: wins per run and the false-win rate, each with its
    binomial intervals. In an A/A run every win is false."""

    model_config = ConfigDict(extra="forbid")

    wins: int
    runs: int
    wins_per_run: RateRecord
    false_win_rate: RateRecord


class KindRates(BaseModel):
    """One kind of A/A run alone (fresh, or continued): both rules against its own reference."""

    model_config = ConfigDict(extra="forbid")

    runs: int
    reference_dev_score: float
    dev_wins: int
    gate_rule: RuleRates
    naive_rule: RuleRates
    selection_effect: dict[str, float] | None


class AaSummary(BaseModel):
    """An A/A as ``segfactory aa --json`` reports it (and ``people/<run>/aa.json`` keeps it).

    The rates count only the runs that reached a decision (``failed`` and ``undecided`` say how
    many did not); the CLI adds what it measured around the runs.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    runs: int
    failed: int
    undecided: int
    reference_dev_score: float
    device_seconds: float
    dev_wins: int
    confirm_a_wins: int
    replicates: int
    confirm_b_queries: int
    gate_rule: RuleRates
    naive_rule: RuleRates
    selection_effect: dict[str, float] | None
    continued: int = 0  # of ``runs``, the continuation runs
    continuation_dev_score: float | None = None  # the continuation reference's, when there was one
    kinds: dict[str, KindRates] = Field(default_factory=dict)  # "fresh" / "continued": each alone
    # added by the CLI
    concurrency: int | None = None
    replay: Replay | None = None  # the false-win replay of promoted wins, when there were any
    ledger: dict[str, int] | None = None  # confirm-a / confirm-b queries the A/A spent
    audit_sandbox_runs: int | None = None

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json", exclude_unset=True)


def _kind(rows: list[CandidateResult], reference: float) -> KindRates:
    decided = [r for r in rows if _decided(r)]
    scores = [r.dev_score for r in rows if r.dev_score is not None]
    return KindRates(
        runs=len(rows),
        reference_dev_score=reference,
        dev_wins=sum(r.status == "dev_win" for r in rows),
        gate_rule=_rule(sum(r.promoted for r in decided), len(decided)),
        naive_rule=_rule(sum(s > reference for s in scores), len(scores)),
        selection_effect=selection_effect(scores).as_dict() if scores else None,
    )


def _rule(wins: int, runs: int) -> RuleRates:
    return RuleRates(
        wins=wins,
        runs=runs,
        wins_per_run=RateRecord.of(rate(wins, runs)),
        false_win_rate=RateRecord.of(false_win_rate(wins, wins)),
    )


def run_aa(
    n_runs: int,
    services: CandidateServices,
    judge: JudgeLike,
    *,
    run_id: str,
    budget: Budget,
    make_seed: Callable[[], int],
    set_reference: Callable[[str], None],
    progress: Callable[[str], None] = lambda line: None,
    concurrency: int = 1,
    continued: int = 0,
    continuation_budget: Budget | None = None,
) -> AAResult:
    """Train the reference, make it the best (``set_reference(ticket_id)``), then the fresh A/A
    runs; then, when ``continued`` > 0, the continuation reference (made the best in turn) and
    ``continued`` continuation runs. ``n_runs`` counts both kinds.

    ``concurrency`` runs that many A/A candidates at once (threads; each ticket is still admitted
    by the runner's scheduler); pass the scheduler's own ``concurrency`` so that no more run than
    it allows. Seeds are drawn in run order before any starts, and results keep run order.
    Raises DataError when a reference does not train (an A/A without a reference means nothing),
    and ValueError when ``continued`` is not within ``0..n_runs``.
    """
    if not 0 <= continued <= n_runs:
        raise ValueError(f"continued={continued}: expected 0..{n_runs} (of the {n_runs} runs)")
    ref = reference_ticket(run_id, budget, make_seed())
    score = _reference(services, ref, set_reference)
    result = AAResult(run_id=run_id, reference_dev_score=score)
    fresh = [aa_ticket(run_id, index, budget, make_seed()) for index in range(n_runs - continued)]
    result.runs.extend(_candidates(services, judge, fresh, score, make_seed, progress, concurrency, n_runs))
    if not continued:
        return result
    long = continuation_budget or budget
    cref = continuation_ticket(run_id, None, long, make_seed(), ref.id)
    result.continuation_dev_score = _reference(services, cref, set_reference)
    tickets = [continuation_ticket(run_id, i, long, make_seed(), ref.id) for i in range(continued)]
    result.continued.extend(
        _candidates(
            services, judge, tickets, result.continuation_dev_score, make_seed, progress, concurrency, n_runs
        )
    )
    return result


def _reference(services: CandidateServices, ticket: Ticket, set_reference: Callable[[str], None]) -> float:
    """Train a reference and make it the current best; its dev score."""
    outcome = services.run_ticket(ticket)
    score = services.dev_score(ticket.id)
    if outcome.status == "failed" or score is None:
        raise DataError(
            f"the A/A reference {ticket.id} did not train ({outcome.reason}); see its outcome.json"
        )
    set_reference(ticket.id)
    return score


def _candidates(
    services: CandidateServices,
    judge: JudgeLike,
    tickets: list[Ticket],
    reference: float,
    make_seed: Callable[[], int],
    progress: Callable[[str], None],
    concurrency: int,
    n_runs: int,
) -> list[CandidateResult]:
    """Each ticket through the agents' pipeline, ``concurrency`` at once, results in run order."""
    done = count(1)

    def one(ticket: Ticket) -> CandidateResult:
        candidate = run_candidate(services, judge, ticket, make_seed)
        progress(
            f"A/A {next(done)}/{len(tickets)} of {n_runs} ({ticket.id}): dev {candidate.dev_score} vs "
            f"reference {reference:.4f} -> {candidate.status}, {candidate.decision or 'no query'}"
        )
        return candidate

    if concurrency <= 1:
        return [one(t) for t in tickets]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="aa") as pool:
        return list(pool.map(one, tickets))


__all__ = [
    "AAResult",
    "AaSummary",
    "KindRates",
    "aa_ticket",
    "continuation_budget",
    "continuation_ticket",
    "noop_edit",
    "run_aa",
]
