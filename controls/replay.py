"""False-win replay: the promoted wins of some runs, scored on the sealed tier within its quota.

Each promotion (``runs/promotions.jsonl``, in order) is paired with the best it replaced (the
previous promotion, else the classical baseline). Pairs are scored on the sealed tier by gate
milestones of at most ``PAIRS_PER_MILESTONE`` pairs; when the sealed quota is spent the tier is
rotated to fresh secret seeds and the milestone retried once. Both models of a pair are always
scored on the same tier version.

The gate's milestone reports each model's object F1 with its own bootstrap interval, not a
paired difference; the replay's difference interval is therefore the conservative unpaired one
(``[low_c - high_b, high_c - low_b]``): the point-estimate criterion is exact, the interval
criterion can only flag fewer false wins than a paired interval would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from audit import AuditLog
from audit.anchor import gate_anchor_store
from audit.gate_events import pull
from controls.rates import RateRecord, false_win_rate, is_false_win
from gate.client import home_gate
from gate.milestone_report import MilestoneReport, ModelScore
from segfactory.errors import GateError
from segfactory.home import Home
from segfactory.layout import RunsLayout
from segfactory.records import sha256_file
from segfactory.stats import Interval

SEALED = "sealed"
PAIRS_PER_MILESTONE = 2  # 2 pairs = at most 4 models, within the sealed quota of 5


class SealedPair(BaseModel):
    """A promoted model and the best it replaced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    ticket_id: str
    model: str
    previous: str


class ReplayRow(SealedPair):
    sealed_diff: Interval | None  # candidate - best on the sealed tier; None: a score is missing
    false_win: bool | None


class Replay(BaseModel):
    """The false-win replay of promoted wins on the sealed tier (a key of the A/A and compare summaries)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    promoted: int
    scored: int
    rows: list[ReplayRow]
    false_win_rate: RateRecord


def pairs_for(home: Home, run_ids: set[str]) -> list[SealedPair]:
    """(promoted model, the best it replaced) for every promotion of ``run_ids``; A/A references and
    compare's restores of its incumbent (``restored``) are not wins, but a restore is the best replaced."""
    runs = RunsLayout(home)
    out, previous = [], str(runs.baseline_model)
    for row in runs.promotions():
        if row.run_id in run_ids and row.kind == "promotion":
            out.append(
                SealedPair(run_id=row.run_id, ticket_id=row.ticket_id, model=row.model, previous=previous)
            )
        previous = row.model
    return out


def _rotate_sealed(client: Any) -> int:
    """A fresh sealed version, drawn by the gate itself (only the gate opens the vault)."""
    return int(client.rotate(SEALED))


def sealed_milestone(
    home: Home, name: str, run_id: str, models: list[Path], progress: Callable[[str], None]
) -> MilestoneReport:
    """Score ``models`` once on the sealed tier (events pulled into the audit log); rotate on quota."""

    for attempt in range(2):
        try:
            with gate_anchor_store(home) as anchor, AuditLog(home, anchor) as log:
                client: Any = anchor.client  # a gate.client.GateClient
                try:
                    report: MilestoneReport = client.milestone(
                        name if not attempt else f"{name}-r", run_id, models, [SEALED]
                    )
                    return report
                finally:
                    pull(client, log)
        except GateError as exc:
            if "quota" not in str(exc) or attempt:
                raise
            progress(f"sealed quota spent ({exc}); rotating the sealed tier to fresh secret seeds")

            with home_gate(home.root) as gate_client:
                _rotate_sealed(gate_client)
    raise AssertionError("unreachable")


def sealed_score(report: MilestoneReport, model: Path) -> ModelScore | None:
    """``model``'s scores on the sealed tier of ``report`` (None: not scored there)."""
    block = report.tiers.get(SEALED)
    return block.models.get(sha256_file(model)) if block is not None else None


def sealed_f1(report: MilestoneReport, model: Path) -> Interval | None:
    score = sealed_score(report, model)
    return score.object_f1 if score is not None else None


def unpaired_diff(candidate: Interval, best: Interval) -> Interval:
    """candidate - best with the conservative interval from the two marginal intervals."""
    return Interval(
        candidate.estimate - best.estimate,
        candidate.low - best.high,
        candidate.high - best.low,
        candidate.alpha,
    )


def replay(
    home: Home,
    run_ids: set[str],
    name: str,
    *,
    margin: float = 0.0,
    progress: Callable[[str], None] = lambda line: None,
) -> Replay:
    """Replay the promoted wins of ``run_ids`` on the sealed tier; returns rows and the false-win rate."""
    pairs = pairs_for(home, run_ids)
    rows = []
    for start in range(0, len(pairs), PAIRS_PER_MILESTONE):
        chunk = pairs[start : start + PAIRS_PER_MILESTONE]
        models = list(dict.fromkeys(Path(m) for p in chunk for m in (p.model, p.previous)))
        report = sealed_milestone(
            home, f"{name}-replay{start // PAIRS_PER_MILESTONE}", name, models, progress
        )
        for pair in chunk:
            cand, best = sealed_f1(report, Path(pair.model)), sealed_f1(report, Path(pair.previous))
            diff = unpaired_diff(cand, best) if cand and best else None
            rows.append(
                ReplayRow(
                    **pair.model_dump(),
                    sealed_diff=diff,
                    false_win=is_false_win(diff, margin) if diff else None,
                )
            )
    scored = [r for r in rows if r.false_win is not None]
    rate = false_win_rate(sum(bool(r.false_win) for r in scored), len(scored))
    return Replay(promoted=len(pairs), scored=len(scored), rows=rows, false_win_rate=RateRecord.of(rate))


__all__ = [
    "Replay",
    "ReplayRow",
    "SealedPair",
    "pairs_for",
    "replay",
    "sealed_f1",
    "sealed_milestone",
    "unpaired_diff",
]
