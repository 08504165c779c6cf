"""data_request tickets wait on their own interrupt() threads; the loop goes on without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.approvals import ApprovalQueue
from agents.graph import run_loop
from segfactory.errors import UsageError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from tests.agents._stubs import make_graph, make_services
from tests.agents.conftest import Log


def _request(tid: str) -> Ticket:
    return Ticket(id=tid, arm=Arm.AGENT, kind=TicketKind.DATA_REQUEST, hypothesis="more real small voids",
                  change={"request_real": 200}, budget=Budget(device_seconds=60, epochs=2), seed=1,
                  expected_effect=ExpectedEffect(metric="iou", slice="small", direction=Direction.UP, size=0.02))


def test_each_request_waits_on_its_own_thread_until_decided(audit_log: Log, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)
    queue.request(_request("q1"), "run1")
    queue.request(_request("q2"), "run1")
    assert [r.id for r in queue.requests("pending")] == ["q1", "q2"]
    for rid in ("q1", "q2"):  # both paused at their interrupt, independently
        assert queue.graph.get_state(queue._config(rid)).next == ("await_decision",)
    again = ApprovalQueue(tmp_path / "state.sqlite", audit_log)  # another process: the console, the CLI
    assert again.decide("q2", approve=True, by="alice").status == "approved"
    assert again.graph.get_state(again._config("q2")).next == ()  # q2's thread ran to its end
    assert again.graph.get_state(again._config("q1")).next == ("await_decision",)  # q1 still waits
    assert queue.decide("q1", approve=False, by="bob", reason="no budget").status == "denied"
    assert [t.id for t in queue.approved("run1")] == ["q2-data"] and queue.approved("run1")[0].kind is TicketKind.DATA
    with pytest.raises(UsageError, match="already approved"):
        queue.decide("q2", approve=False, by="eve")
    with pytest.raises(UsageError, match="no approval request"):
        queue.decide("nope", approve=True, by="eve")
    assert [e["status"] for e in audit_log.events("approval_decided")] == ["approved", "denied"]


def test_the_loop_does_not_wait_and_an_approved_request_enters_the_queue(audit_log: Log, tmp_path: Path) -> None:
    services = make_services(requests=("request_real",))
    services.dev["request_real"] = "dev_loss"
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)

    def person_approves_meanwhile(ticket: Ticket) -> None:
        pending = queue.requests("pending")
        if ticket.id.endswith("t003") and pending:  # the loop ran on while the request waited
            queue.decide(pending[0].id, approve=True, by="alice")
        ran_before_approval.append(ticket.id)

    ran_before_approval: list[str] = []
    services.on_run = person_approves_meanwhile
    state = run_loop(make_graph(services, audit_log, tmp_path, approvals=queue), "run7")
    request_id = queue.requests()[0].id
    assert queue.requests()[0].status == "approved"
    assert f"{request_id}-data" in services.runs and services.runs.count(f"{request_id}-data") == 1
    assert request_id not in services.runs  # the request itself never runs
    assert state["taken_approvals"] == [f"{request_id}-data"]
    assert ran_before_approval[:2] == ["run7-t002", "run7-t002-rep"]  # work went on while it waited
