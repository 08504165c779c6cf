"""The one real ticket executor of the controlled experiments: ``runner.execute_ticket`` in a sandbox.

The synthetic top-up (``controls.topup``), its second round (``controls.rounds``) and the
curation compare (``controls.curate_compare``) run their tickets through a ``TicketExecutor``;
``RunnerExecutor`` is the real one, and tests pass stand-ins with the same call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, JsonValue

from audit import AuditLog
from runner import TicketRunner, TicketStatus
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion


class ExecutedTicket(BaseModel):
    """What running one ticket came to, as the controlled experiments report it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: str  # DONE / FAILED / REFUSED ... (runner.TicketStatus)
    reason: str | None = None
    dev_metrics: dict[str, float] | None = None
    verdict: str | None = None  # the gate's word, when a gate was asked
    model: str | None = None  # the ticket's model.onnx when it is DONE


class TicketExecutor(Protocol):
    """Runs one ticket on one dataset version. Never raises for a bad ticket: the outcome says."""

    def __call__(self, ticket: Ticket, version: DatasetVersion) -> ExecutedTicket: ...


class RunnerExecutor:
    """``runner.execute_ticket`` in a sandbox, audited, optionally gated.

    ``audit`` defaults to the home's audit log (unanchored until the next anchored writer);
    ``scheduler`` to the home's (``Scheduler.for_home``); ``gate`` is a gate client or None.
    """

    def __init__(
        self,
        home: Home,
        *,
        backend: Any,
        base_config: Path | dict[str, JsonValue],
        run_id: str,
        gate: Any = None,
        audit: Any = None,
        scheduler: Any = None,
    ) -> None:
        self.home, self.backend, self.base_config = home, backend, base_config
        self.gate, self.run_id, self.audit, self.scheduler = gate, run_id, audit, scheduler

    def __call__(self, ticket: Ticket, version: DatasetVersion) -> ExecutedTicket:
        audit = self.audit or AuditLog(self.home, None)
        try:
            runner = TicketRunner(
                self.home, self.backend, audit, run_id=self.run_id, gate=self.gate, scheduler=self.scheduler
            )
            outcome = runner.run(ticket, version, self.base_config)
        finally:
            if self.audit is None:
                audit.close()
        model = self.home.tickets_dir(self.run_id) / ticket.id / "model.onnx"
        return ExecutedTicket(
            status=outcome.status.value,
            reason=outcome.reason,
            dev_metrics=outcome.evidence.dev_metrics if outcome.evidence else None,
            verdict=outcome.verdict.verdict.value if outcome.verdict else None,
            model=str(model) if outcome.status == TicketStatus.DONE else None,
        )


__all__ = ["ExecutedTicket", "RunnerExecutor", "TicketExecutor"]
