"""The host side a control run uses: sandbox check, gate, audit log, ``HostServices``, the judge.

``control_session`` mirrors ``agents.run.start_run`` (same verify, same gate, same win-rule
check, same services), so that a sweep or an A/A run is accounted exactly like an agent run.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pydantic import JsonValue

from agents.judge import Judge
from agents.run import check_win_rule, running_user, verify_sandbox
from agents.run_policy import DATASET, load_run_defaults
from agents.run_setup import RunSetup
from agents.services import HostServices
from agents.state import RunOutcome
from audit import AuditLog
from audit.anchor import gate_anchor_store
from audit.gate_events import pull
from audit.reader import iter_records
from gate.client import GateClient
from gate.win_rule import load_win_rule
from runner import TicketOutcome
from segfactory.home import SOURCE_ROOT, Home
from segfactory.layout import Promotion, RunRecord
from segfactory.records import Actor, Budget, CoarseVerdict, Ticket, sha256_file
from synthetic.versions import resolve

RANDOM_SEED_BOUND = 2**31  # host-chosen training seeds lie in [0, this)


class ControlServices:
    """The route a control run sends its candidates along: ``HostServices``' run, gate and
    promotion, plus the host-computed dev score of a ticket and the A/A reference move."""

    def __init__(self, host: HostServices) -> None:
        self.host = host
        self.setup = host.setup

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        return self.host.run_ticket(ticket, wall_left_s)

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        return self.host.submit(ticket, model_ref, replicate_of)

    def promote(self, ticket_id: str) -> None:
        self.host.promote(ticket_id)

    def dev_score(self, ticket_id: str) -> float | None:
        """The host-computed dev object F1 from the ticket's ``outcome.json``; None if it did not train."""
        path = self.setup.layout.ticket(ticket_id).outcome
        if not path.is_file():
            return None
        outcome = TicketOutcome.model_validate_json(path.read_text())
        return float(outcome.evidence.dev_metrics["object_f1"]) if outcome.evidence else None

    def set_reference(self, ticket_id: str) -> None:
        """Make a ticket's model the current best for A/A runs: the gate records it as a move of kind
        ``reference`` (never a promotion). It goes through the gate's host surface: only the gate opens
        the vault."""
        s = self.setup
        model = s.layout.ticket(ticket_id).model
        s.gate.set_reference(
            model, f"A/A run {s.run_id}: reference {ticket_id} (the default config) becomes the best"
        )
        row = Promotion(
            model=str(model),
            sha256=sha256_file(model),
            run_id=s.run_id,
            ticket_id=ticket_id,
            kind="reference",
        )
        s.runs.append_promotion(row)
        s.audit_event("aa_reference_set", {"ticket_id": ticket_id})
        pull(s.gate, s.audit)


@dataclass
class Session:
    """One control run's host side, open for the length of ``control_session``."""

    services: ControlServices
    judge: Judge
    audit: AuditLog
    client: GateClient
    ticket_budget: Budget
    base_config: dict[str, JsonValue]  # the profile's base training config, as its YAML holds it
    make_seed: Callable[[], int]

    def spent(self) -> dict[str, int]:
        """Queries spent so far per tier (current versions summed), from the gate's ledger."""
        out: dict[str, int] = {}
        for row in self.client.status().tiers:
            out[row.tier] = out.get(row.tier, 0) + row.spent
        return out


def new_run_id(prefix: str) -> str:
    return time.strftime(f"{prefix}%Y%m%d-%H%M%S", time.gmtime()) + f"-{secrets.token_hex(2)}"


@contextmanager
def control_session(
    home: Home,
    *,
    backend: str,
    profile: str,
    run_id: str,
    kind: str,
    progress: Callable[[str], None],
    concurrency: int = 1,
) -> Iterator[Session]:
    """Verify the sandbox, start (or reach) the gate, open the audit log; close the run at the end.
    ``concurrency``: tickets the session's one scheduler lets train at once."""
    import yaml

    defaults = load_run_defaults(profile)
    base_path = SOURCE_ROOT / defaults.base_config
    verify_sandbox(backend, home, progress)
    with gate_anchor_store(home) as anchor, AuditLog(home, anchor) as audit:
        client = anchor.client
        digest = check_win_rule(client)
        rule, _ = load_win_rule()
        setup = RunSetup(
            home=home,
            run_id=run_id,
            backend=backend,
            dataset=resolve(home.root, DATASET),
            base_config=base_path,
            gate=client,
            audit=audit,
            dev_margin=rule.dev_rule.dev_margin,
            progress=progress,
            concurrency=concurrency,
        )
        record = RunRecord(
            run_id=run_id,
            kind=kind,
            profile=profile,
            backend=backend,
            win_rule_sha256=digest,
            started_at=time.time(),
            user=running_user(),
            concurrency=concurrency,
        )
        setup.layout.write_record(record)
        audit.append(Actor.SYSTEM, f"{kind}_start", record.line(), run_id=run_id)
        yield Session(
            ControlServices(HostServices(setup)),
            Judge(audit, run_id=run_id),
            audit,
            client,
            defaults.ticket,
            yaml.safe_load(base_path.read_text()),
            lambda: secrets.randbelow(RANDOM_SEED_BOUND),
        )
        audit.append(Actor.SYSTEM, f"{kind}_end", {"run_id": run_id}, run_id=run_id)
        audit.close_run(run_id)


def sandbox_runs(home: Home, run_id: str) -> int:
    """Sandbox runs the audit log records for a run (``ticket_attempt`` events of the runner)."""

    path = home.audit / "log.jsonl"
    if not path.is_file():
        return 0
    return sum(r.run_id == run_id and r.event == "ticket_attempt" for r in iter_records(path))


__all__ = ["ControlServices", "Session", "control_session", "new_run_id", "sandbox_runs"]
