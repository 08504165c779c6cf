"""A ticket with audit findings is held for a person: no gate query, no promotion; the run goes on.

The loop is the real graph over the graph tests' stub runner and gate, with the real audit log
and the real ``audit check`` behind ``AuditHolds``. The findings are what the runner writes for
a sandbox event (actor ``sandbox``, with ``ticket_id``), here for a vault read that failed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from agents.audit_hold import AuditHolds
from agents.graph import run_loop
from segfactory.records import Ticket
from tests.agents._stubs import make_graph, make_services
from tests.agents.conftest import Log

RUN = "h1"
FIRST = f"{RUN}-t001"  # the rules proposer's first ticket: a dev win, then WIN and a replicate WIN


def _attempt(log: Log, ticket_id: str, path: str = "/srv/home/vault/seeds.json") -> None:
    """What the runner records when the sandbox's audit hook saw an open (it failed: ENOENT)."""
    event = {"kind": "file_open", "ts": 1.0, "path": path, "sandbox_reported": True, "detail": {"op": "open"}}
    log.append("sandbox", "file_open", {**event, "ticket_id": ticket_id, "attempt": 1}, run_id=RUN)


def _run(log: Log, tmp_path: Path, tried: set[str]) -> tuple[Any, Any]:
    services = make_services()

    def sandbox_attempts(ticket: Ticket) -> None:
        if ticket.id in tried:
            _attempt(log, ticket.id)

    services.on_run = sandbox_attempts
    graph = make_graph(services, log, tmp_path, tickets=4, audit_hold=AuditHolds(log.home.root).hold)
    return services, run_loop(graph, RUN)


def test_a_ticket_with_findings_is_held_and_the_run_goes_on(audit_log: Log, tmp_path: Path) -> None:
    services, state = _run(audit_log, tmp_path, {FIRST})
    assert FIRST in services.runs and FIRST not in services.queries  # trained, never submitted
    assert FIRST not in services.promoted and f"{FIRST}-rep" not in services.runs
    assert state.held[FIRST].pending == "audit" and state.held[FIRST].findings == 1
    [held] = audit_log.events("ticket_held")
    assert held["ticket"] == FIRST and [f["path"] for f in held["findings"]] == ["/srv/home/vault/seeds.json"]
    [entry] = [h for h in state.history if h.ticket_id == FIRST]
    assert entry.verdict == "FAILED" and entry.tier is None
    assert len(services.runs) > 1 and services.queries  # the next tickets ran and were gated
    assert services.ended[-1].startswith("report")


def test_without_findings_the_same_ticket_is_gated_and_promoted(audit_log: Log, tmp_path: Path) -> None:
    services, state = _run(audit_log, tmp_path, set())
    assert FIRST in services.queries and FIRST in services.promoted
    assert not state.held and not audit_log.events("ticket_held")


def test_a_held_replicate_rejects_its_original(audit_log: Log, tmp_path: Path) -> None:
    services, state = _run(audit_log, tmp_path, {f"{FIRST}-rep"})
    assert FIRST in services.queries and f"{FIRST}-rep" not in services.queries
    assert not services.promoted
    decisions = [d for d in state.decisions if d.ticket_id == FIRST]
    assert [d.decision for d in decisions] == ["replicate", "reject"]  # confirm-a WIN, then the hold
    assert "held for audit findings" in decisions[-1].reason


def test_the_code_agents_own_sandbox_findings_hold_the_ticket_it_wrote(audit_log: Log) -> None:
    """The agent's `run` commands for a draft are audited under the draft's key; the ticket whose
    files are the ones the agent wrote for that draft is held for them."""
    text = "print('the agent wrote this')\n"
    ticket = Ticket(
        id=FIRST,
        arm="agent-code",
        kind="code",
        hypothesis="a worker",
        change={"files": {"code/vision/worker.py": text}},
        budget={"device_seconds": 60, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=1,
    )
    written = {
        "code/vision/worker.py": {"bytes": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()}
    }
    audit_log.append("code-agent", "code_agent_files", {"draft": "d-abc", "files": written}, run_id=RUN)
    event = {"kind": "socket_call", "ts": 1.0, "path": None, "detail": {"address": "('10.0.2.2', 80)"}}
    audit_log.append("code-agent", "socket_call", {"ticket": "d-abc", "tool": "run", **event}, run_id=RUN)
    audit_log.append("code-agent", "socket_call", {"ticket": "d-other", "tool": "run", **event}, run_id=RUN)
    hold = AuditHolds(audit_log.home.root).hold(RUN, ticket)
    assert hold is not None and hold.drafts == ["d-abc"]
    assert [(f.ticket_id, f.path) for f in hold.findings] == [("d-abc", "('10.0.2.2', 80)")]
    assert AuditHolds(audit_log.home.root).hold("another-run", ticket) is None
