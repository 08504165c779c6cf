"""``segfactory aa``: A/A runs, where every win is false by construction.

A reference ticket trains the default config and becomes the current best (a recorded move
with its reason). Then N tickets train the *same* config with fresh host-chosen seeds; every
other one is a ``code`` ticket whose only edit is a comment appended to a training module, so
the code path is exercised too. Each goes through ``run_candidate``, the agents' own path.
Nothing differs but noise, so any win (of the gate's rule, or of a naive "best dev score wins"
rule on the same runs) is false.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from controls.pipeline import CandidateResult, CandidateServices, JudgeLike, run_candidate
from controls.rates import RateRecord, false_win_rate, rate, selection_effect
from controls.replay import Replay
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
    run_id: str
    reference_dev_score: float
    runs: list[CandidateResult] = field(default_factory=list)

    def summary(self) -> AaSummary:
        """The rates over the runs that reached a decision: a run that failed to train, or whose
        replicate failed after a confirm-a WIN, could not win, and counting it as a non-win would
        make the false-win rate look better than it is. ``failed`` and ``undecided`` say how many."""
        n = len(self.runs)
        decided = [r for r in self.runs if r.status != "failed" and r.replicate_status != "failed"]
        scores = [r.dev_score for r in self.runs if r.dev_score is not None]
        gate_wins = sum(r.promoted for r in decided)
        naive_wins = sum(s > self.reference_dev_score for s in scores)
        return AaSummary(
            run_id=self.run_id,
            runs=n,
            failed=sum(r.status == "failed" for r in self.runs),
            undecided=sum(r.status != "failed" and r.replicate_status == "failed" for r in self.runs),
            reference_dev_score=self.reference_dev_score,
            device_seconds=sum(r.device_seconds for r in self.runs),
            dev_wins=sum(r.status == "dev_win" for r in self.runs),
            confirm_a_wins=sum(r.confirm_a is not None and r.confirm_a.value == "WIN" for r in self.runs),
            replicates=sum(r.replicate_id is not None for r in self.runs),
            confirm_b_queries=sum(r.confirm_b is not None for r in self.runs),
            gate_rule=_rule(gate_wins, len(decided)),
            naive_rule=_rule(naive_wins, len(scores)),
            selection_effect=selection_effect(scores).as_dict() if scores else None,
        )


class RuleRates(BaseModel):
    """One decision rule over the A/A runs: wins per run and the false-win rate, each with its
    binomial intervals. In an A/A run every win is false."""

    model_config = ConfigDict(extra="forbid")

    wins: int
    runs: int
    wins_per_run: RateRecord
    false_win_rate: RateRecord


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
    # added by the CLI
    concurrency: int | None = None
    replay: Replay | None = None  # the false-win replay of promoted wins, when there were any
    ledger: dict[str, int] | None = None  # confirm-a / confirm-b queries the A/A spent
    audit_sandbox_runs: int | None = None

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json", exclude_unset=True)


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
) -> AAResult:
    """Train the reference, make it the best (``set_reference(ticket_id)``), then the N A/A runs.

    ``concurrency`` runs that many A/A candidates at once (threads; each ticket is still admitted
    by the runner's scheduler); pass the scheduler's own ``concurrency`` so that no more run than
    it allows. Seeds are drawn in run order before any starts, and results keep run order.
    Raises DataError when the reference does not train (an A/A without a reference means nothing).
    """

    ref = reference_ticket(run_id, budget, make_seed())
    outcome = services.run_ticket(ref)
    score = services.dev_score(ref.id)
    if outcome.status == "failed" or score is None:
        raise DataError(f"the A/A reference {ref.id} did not train ({outcome.reason}); see its outcome.json")
    set_reference(ref.id)
    result = AAResult(run_id=run_id, reference_dev_score=score)
    tickets = [aa_ticket(run_id, index, budget, make_seed()) for index in range(n_runs)]

    def one(index: int) -> CandidateResult:
        candidate = run_candidate(services, judge, tickets[index], make_seed)
        progress(
            f"A/A {index + 1}/{n_runs}: dev {candidate.dev_score} vs reference {score:.4f} -> "
            f"{candidate.status}, {candidate.decision or 'no query'}"
        )
        return candidate

    if concurrency <= 1:
        result.runs.extend(one(i) for i in range(n_runs))
        return result
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="aa") as pool:
        result.runs.extend(pool.map(one, range(n_runs)))
    return result


__all__ = ["AAResult", "aa_ticket", "noop_edit", "run_aa"]
