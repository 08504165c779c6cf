"""What the loop's steps are given: the host services and everything else they call.

``FactoryServices`` is the host side as the graph uses it (``agents.services.HostServices``
implements it; tests pass stubs). ``LoopDeps`` bundles it with the proposer, the judge, the
audit sink, the run's caps and rules, so that each step (``agents.steps``) receives one object.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agents.approvals import ApprovalQueue
from agents.audit_hold import AuditHold
from agents.budget_plan import BudgetPlanner
from agents.context import DevAnalysis
from agents.incumbent import Incumbent
from agents.judge import Judge
from agents.llm import LLMUsage
from agents.proposer import Proposer
from agents.state import RunOutcome
from segfactory.budgets import RunCaps
from segfactory.records import Budget, CoarseVerdict, Ticket
from segfactory.seams import AuditSink

DEVICE_LEFT_SHARE = 0.5  # no new ticket when less than this share of an average ticket's device time is left


class FactoryServices(Protocol):
    """The runner, gate and reporting side, as the graph uses them.

    ``run_ticket`` trains one ticket in the sandbox and compares it with the current best on dev
    (host-computed), and must be idempotent by ticket id (a resumed run may call it again); the
    worker gets at most ``wall_left_s`` of the run's wall time.
    ``check`` is the host's refusal of a ticket before it is queued (one that would train exactly
    what its parent trained), with the reasons. ``submit`` queries the gate (confirm-a, or
    confirm-b with ``replicate_of``); the gate answers a repeated ticket id from its cache
    without spending twice. ``promote`` moves the global best
    to the ticket's model after the judge's ``promote`` (idempotent: a resumed run may repeat it).
    """

    def analyse(self) -> DevAnalysis: ...

    def realise(self, analysis: DevAnalysis) -> DevAnalysis: ...

    def incumbent(self) -> Incumbent: ...

    def check(self, ticket: Ticket) -> list[str]: ...

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome: ...

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict: ...

    def promote(self, ticket_id: str) -> None: ...

    def milestone(self, run_id: str) -> None: ...

    def report(self, run_id: str, stop_reason: str) -> None: ...


@dataclass
class LoopDeps:
    """Everything the steps call. ``check`` validates a ticket (see ``agents.validate``)."""

    services: FactoryServices
    proposer: Proposer
    judge: Judge
    sink: AuditSink
    caps: RunCaps
    usage: LLMUsage
    check: Callable[[Ticket], list[str]]
    make_seed: Callable[[], int]
    clock: Callable[[], float] = time.time
    approvals: ApprovalQueue | None = None  # data_request tickets and escalations go here
    plateau_tickets: int = 0  # stop after this many tickets in a row without a dev win (0: never)
    default_action: bool = False  # each round on a trained best starts with a fresh-seed re-run (a control)
    default_budget: Budget | None = None  # the budget of that re-run: the proposer's default ticket budget
    # No new ticket when less than this share of an average ticket's device time is left. 0: a new
    # ticket starts while any device time is left, as a sweep's trials do (``compare`` sets it so
    # that every arm stops by the same rule).
    device_left_share: float = DEVICE_LEFT_SHARE
    # Tickets trained at once: the run step takes up to this many from the head of the queue and
    # trains them together (each admitted by the run's one scheduler); they are then gated,
    # judged and recorded one at a time, in queue order, before the loop re-analyses or proposes.
    concurrency: int = 1
    # A ticket with audit findings is held before the gate (``agents.audit_hold``); None: never held.
    audit_hold: Callable[[str, Ticket], AuditHold | None] | None = None
    # How the run spends its device budget (``agents.budget_plan``); None: every ticket is the
    # proposer's, at its own budget.
    planner: BudgetPlanner | None = None


__all__ = ["DEVICE_LEFT_SHARE", "FactoryServices", "LoopDeps"]
