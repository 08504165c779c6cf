"""One ticket's route through the host, in order: plan, train, compare on dev.

``TicketRoute.run(ticket)`` reads as the recipe it is:

1. **resume or start** (``agents.lineage``): a ticket whose ``outcome.json`` exists finished
   before a crash and is answered from it; a ticket folder without one (a crash mid-ticket) is
   moved aside to ``tickets/.crashed/``; otherwise the ticket is recorded as started, planned,
   and refused if it would train exactly its parent's inputs;
2. **train** (``runner``): the ticket, patched onto its parent, runs in the sandbox under the
   run's one scheduler and returns host-computed evidence;
3. **compare on dev** (``agents.dev_compare``): a dev win, a dev loss or a control.

The gate and the judge come after, in the graph (``agents.graph``) and ``agents.promotion``.
Several tickets may run at once: only the sandboxed training runs outside the route's lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agents.budget_plan import final_caps, is_final
from agents.dev_compare import DevComparer
from agents.incumbent import Incumbent
from agents.lineage import LineagePlanner, base_config_for, runnable
from agents.run_setup import RunSetup
from agents.state import RunOutcome
from runner import Scheduler, SchedulerSettings, TicketOutcome, TicketRunner, TicketStatus
from segfactory.budgets import ticket_caps
from segfactory.errors import SegfactoryError
from segfactory.layout import Lineage
from segfactory.records import Ticket
from synthetic.versions import resolve

MAX_REASON_CHARS = 120  # a failure reason as the progress line shows it; the outcome keeps it whole


class Executor(Protocol):
    """Trains one runnable ticket (patched onto ``parent``) on its lineage's dataset version in the
    sandbox and returns the runner's outcome. It never raises for a bad ticket (a refusal or a
    failure is an outcome); a ``SegfactoryError`` means it could not start."""

    def __call__(
        self, ticket: Ticket, parent: Incumbent, lineage: Lineage, wall_left_s: float | None
    ) -> TicketOutcome: ...


@dataclass
class _Planned:
    lineage: Lineage
    parent: Incumbent
    runnable: Ticket


class SandboxExecutor:
    """The real executor: ``runner.TicketRunner`` under the run's one scheduler, so that tickets
    trained at once share its memory accounting and split the CPU between them."""

    def __init__(self, setup: RunSetup) -> None:
        self.setup = setup
        self._scheduler: Scheduler | None = None
        self._lock = threading.Lock()

    def scheduler(self) -> Scheduler:
        with self._lock:
            if self._scheduler is None:
                settings = SchedulerSettings(concurrency=self.setup.concurrency)
                self._scheduler = Scheduler.for_home(self.setup.home, settings)
            return self._scheduler

    def __call__(
        self, ticket: Ticket, parent: Incumbent, lineage: Lineage, wall_left_s: float | None
    ) -> TicketOutcome:
        s = self.setup
        dataset = resolve(s.home.root, lineage.dataset)
        caps = s.ticket_caps  # None: the home profile's (the runner reads them)
        if is_final(s.layout, ticket):  # the plan's written rule: its final may pass the cap
            caps = final_caps(
                s.layout, ticket, caps or ticket_caps(str(s.home.info().get("profile", "default")))
            )
        runner = TicketRunner(
            s.home,
            s.backend,
            s.audit,
            run_id=s.run_id,
            scheduler=self.scheduler(),
            scorer=s.score,
            budget_policy=caps,
            progress=s.progress,
        )
        if lineage.members:  # a packaging ticket trains nothing: it packages its members
            return runner.package(ticket, dataset, lineage.members, wall_left_s=wall_left_s)
        base = base_config_for(parent, dataset)
        return runner.run(ticket, dataset, base, wall_left_s=wall_left_s, init_from=lineage.init_from)


class TicketRoute:
    """``run`` takes one ticket from plan to dev comparison; idempotent by ticket id."""

    def __init__(
        self, setup: RunSetup, lineage: LineagePlanner, comparer: DevComparer, execute: Executor
    ) -> None:
        self.setup, self.lineage, self.comparer, self.execute = setup, lineage, comparer, execute
        self._lock = threading.RLock()  # everything but the sandboxed training holds it

    def run(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        files = self.setup.layout.ticket(ticket.id)
        with self._lock:
            if files.outcome.is_file():  # a resumed run: this ticket finished before the crash
                outcome = TicketOutcome.model_validate_json(files.outcome.read_text())
                lineage = self.lineage.lineage().get(ticket.id) or self.lineage.plan(ticket)
                return self._compared(ticket, lineage, outcome, files.model)
            try:
                planned = self._start(ticket, files.root)
            except SegfactoryError as exc:  # e.g. a slice the generator cannot target: a recorded failure
                return self._failed_to_start(ticket, exc)
        try:  # the one step outside the lock: tickets of a batch train at once
            outcome = self.execute(planned.runnable, planned.parent, planned.lineage, wall_left_s)
        except SegfactoryError as exc:
            with self._lock:
                return self._failed_to_start(ticket, exc)
        with self._lock:
            return self._compared(ticket, planned.lineage, outcome, files.model)

    def _start(self, ticket: Ticket, folder: Path) -> _Planned:
        if folder.exists():
            self._set_aside(folder)
        self.setup.progress(f"ticket {ticket.id} ({ticket.kind.value}): {ticket.hypothesis[:70]}")
        self.setup.layout.append_started(ticket)  # for the report: kind, replicate_of, budget
        lineage = self.lineage.start(ticket)
        parent = self.lineage.parent_of(ticket)
        return _Planned(lineage, parent, runnable(ticket, parent))

    def _compared(self, ticket: Ticket, lineage: Lineage, outcome: TicketOutcome, model: Path) -> RunOutcome:
        if outcome.status is not TicketStatus.DONE or outcome.evidence is None:
            reason = outcome.reason or outcome.status.value
            self.setup.progress(f"  {ticket.id}: {outcome.status.value.lower()}: {reason[:MAX_REASON_CHARS]}")
            return RunOutcome(
                ticket_id=ticket.id, status="failed", device_seconds=outcome.device_seconds, reason=reason
            )
        metrics = outcome.evidence.dev_metrics
        if abs(outcome.evidence.threshold - self.setup.threshold) > 1e-12:  # the rule's threshold, for both
            metrics = self.comparer.dev_metrics(model)
        return self.comparer.compare(ticket, lineage, metrics, outcome.device_seconds, model)

    def _failed_to_start(self, ticket: Ticket, exc: SegfactoryError) -> RunOutcome:
        self.setup.audit_event("ticket_failed", {"ticket_id": ticket.id, "reason": str(exc)})
        self.setup.progress(f"  {ticket.id}: failed: {exc}")
        return RunOutcome(ticket_id=ticket.id, status="failed", device_seconds=0.0, reason=str(exc))

    def _set_aside(self, folder: Path) -> None:
        aside = self.setup.layout.crashed / f"{folder.name}-{int(time.time())}"
        aside.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(aside)
        self.setup.audit_event(
            "ticket_set_aside",
            {
                "ticket_id": folder.name,
                "moved_to": str(aside),
                "reason": "folder without outcome.json: the run crashed mid-ticket",
            },
        )


__all__ = ["Executor", "SandboxExecutor", "TicketRoute"]
