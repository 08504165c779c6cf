"""Arm isolation for ``compare``: every arm-run starts from the same incumbent and the same bar.

The arms of a comparison share one home, so that they share its gate, tiers and ledger (the
sealed tier is what makes their scores comparable). They also share its one global best, and a
promotion in one arm would raise the bar the next arm's dev wins are measured against, and
change the incumbent its tickets patch. So before each arm-run the best is moved back to the
incumbent the comparison started from: through the gate's host surface, as the reference the
arm-run is measured against (a move of kind ``reference`` in the gate's ledger, never a
promotion, with its reason; the gate's ``retract`` cannot do it, since it steps back one model
at a time and, after two promotions, steps back onto the later one), and a row in
``runs/promotions.jsonl`` (ticket id ``<label>-restore``) that names the restored model, so that
the false-win replay pairs each later promotion with the best it really replaced. After the last
arm-run the incumbent is restored once more: a comparison leaves the home's best as it found it.

The query budgets are per tier version, and the arms would otherwise share them: an early arm
that spends confirm-a's 30 queries leaves the next arm only BUDGET_EXHAUSTED answers, and its
queries would have told it about the images the next arm is judged on. So before each arm-run
every queried tier (confirm-a, confirm-b) whose current version has answered anything is drawn
afresh by the gate (a ``gate.rotate`` event: same generator, size and budget, new secret seeds).
Every arm-run therefore meets tiers of the same definition with their full budgets, none of it
seen by another arm; the sealed tier the arms are ranked on stays one version per seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from audit import AuditLog
from audit.anchor import gate_anchor_store
from audit.gate_events import pull
from gate.replies import TierState
from segfactory.errors import DataError, GateError
from segfactory.home import Home
from segfactory.layout import Promotion, RunsLayout

QUERIED_TIERS = ("confirm-a", "confirm-b")  # the tiers a submission spends a query of
RESTORE_SUFFIX = "-restore"  # ticket id suffix of a restore row in promotions.jsonl


@dataclass(frozen=True)
class Incumbent:
    sha256: str
    model: Path  # the host's copy


class BestStore(Protocol):
    """Where the global best lives. ``current`` reads it; ``restore`` moves it back (recorded)."""

    def current(self) -> Incumbent: ...

    def restore(self, incumbent: Incumbent, reason: str) -> None: ...

    def fresh_tiers(self) -> dict[str, int]:
        """Redraw each queried tier another arm-run has queried; {tier: new version}."""
        ...


def spent_tiers(tier_versions: list[TierState]) -> list[str]:
    """The queried tiers whose current (highest) version has answered at least one query."""
    current: dict[str, TierState] = {}
    for row in tier_versions:
        if row.tier in QUERIED_TIERS and (
            row.tier not in current or row.version >= current[row.tier].version
        ):
            current[row.tier] = row
    return [tier for tier in QUERIED_TIERS if tier in current and current[tier].spent > 0]


def host_copy(home: Home, sha256: str) -> Path:
    """The host's copy of a best (a promotion row, else the classical baseline); DataError if none."""

    copy = RunsLayout(home).host_copy(sha256)
    if copy is not None:
        return copy
    raise DataError(
        f"the current best {sha256[:12]}… has no host copy (baseline or promotions.jsonl); "
        "compare cannot restore it between arms"
    )


class GateBestStore:
    """The home's gate, through its host surface (only the gate opens the vault); events go to the audit
    log."""

    def __init__(self, home: Home, compare_id: str) -> None:
        self.home, self.compare_id = home, compare_id

    def _call(self, act: Callable[[Any], Any]) -> Any:
        with gate_anchor_store(self.home) as anchor, AuditLog(self.home, anchor) as log:
            client: Any = anchor.client  # a gate.client.GateClient
            try:
                return act(client)
            finally:
                pull(client, log)

    def current(self) -> Incumbent:
        sha = self._call(lambda client: client.status().current_best)
        if not sha:
            raise GateError("the gate has no current best; `segfactory init` registers the baseline")
        return Incumbent(str(sha), host_copy(self.home, str(sha)))

    def restore(self, incumbent: Incumbent, reason: str) -> None:
        self._call(lambda client: client.set_reference(incumbent.model, reason))
        row = Promotion(
            model=str(incumbent.model),
            sha256=incumbent.sha256,
            run_id=self.compare_id,
            ticket_id=f"{self.compare_id}{RESTORE_SUFFIX}",
            kind="restore",
            reason=reason,
        )
        RunsLayout(self.home).append_promotion(row)

    def fresh_tiers(self) -> dict[str, int]:
        def redraw(client: Any) -> dict[str, int]:
            return {tier: int(client.rotate(tier)) for tier in spent_tiers(client.status().tiers)}

        return dict(self._call(redraw))


def start_from(store: BestStore, incumbent: Incumbent, label: str) -> bool:
    """Move the best back to ``incumbent`` if another arm moved it; True when it had moved."""
    if store.current().sha256 == incumbent.sha256:
        return False
    store.restore(
        incumbent, f"compare arm isolation: {label} starts from the incumbent {incumbent.sha256[:12]}"
    )
    return True


__all__ = [
    "BestStore",
    "GateBestStore",
    "Incumbent",
    "QUERIED_TIERS",
    "RESTORE_SUFFIX",
    "host_copy",
    "spent_tiers",
    "start_from",
]
