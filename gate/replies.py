"""What the gate answers about itself, as records: ``GateStatus`` with its tiers and quarantines.

The service builds them (``gate.core.Gate.status``) and the client parses its reply into them, so
a reply that does not fit is refused at the client instead of travelling on as a dict. An agent's
credential sees a quarantine without its ``ts`` and ``reason`` (the reason can quote held-back
rows); a record is dumped with ``exclude_unset``, so those keys are absent, not null.
"""

from __future__ import annotations

from segfactory.records import Result


class TierState(Result):
    """One version of a held-back tier and its query budget."""

    tier: str
    version: int
    budget: int
    spent: int
    left: int


class Quarantine(Result):
    """A run the gate stopped answering (a leak was found in what it submitted)."""

    run_id: str | None
    ticket_id: str
    ts: float | None = None  # people only
    reason: str | None = None  # people only: it can quote held-back rows


class GateStatus(Result):
    """``GET /status``: what people and the orchestrator may know about the gate."""

    win_rule_sha256: str | None  # the pinned rule's hash (None before init pinned one)
    win_rule_ok: bool  # the pinned rule still loads and matches its hash
    pinned_code_sha256: str | None
    pinned_code_ok: bool | None  # None when the gate runs without a pinned copy (tests)
    tiers: list[TierState]
    quarantine: list[Quarantine]
    current_best: str | None  # the current best model's sha256

    def for_agent(self) -> GateStatus:
        """The view of an agent's credential: quarantines without their reason or time."""
        hidden = [Quarantine(run_id=q.run_id, ticket_id=q.ticket_id) for q in self.quarantine]
        return self.model_copy(update={"quarantine": hidden})


__all__ = ["GateStatus", "Quarantine", "TierState"]
