"""data_request tickets wait on their own interrupt() threads; the loop goes on without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.approvals import ApprovalQueue, EscalationAnswer
from agents.graph import run_loop
from agents.judge import Decision, JudgeDecision
from segfactory.errors import UsageError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from tests.agents._stubs import make_graph, make_services
from tests.agents.conftest import Log


def _request(tid: str) -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.AGENT,
        kind=TicketKind.DATA_REQUEST,
        hypothesis="more real small voids",
        change={"request_real": 200},
        budget=Budget(device_seconds=60, epochs=2),
        seed=1,
        expected_effect=ExpectedEffect(metric="iou", slice="small", direction=Direction.UP, size=0.02),
    )


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
    assert [t.id for t in queue.approved("run1")] == ["q2-data"] and queue.approved("run1")[
        0
    ].kind is TicketKind.DATA
    with pytest.raises(UsageError, match="already approved"):
        queue.decide("q2", approve=False, by="eve")
    with pytest.raises(UsageError, match="no approval request"):
        queue.decide("nope", approve=True, by="eve")
    assert [e["status"] for e in audit_log.events("approval_decided")] == ["approved", "denied"]


def test_the_loop_does_not_wait_and_an_approved_request_enters_the_queue(
    audit_log: Log, tmp_path: Path
) -> None:
    services = make_services(requests=("request_real",))
    services.dev["request_real"] = "dev_loss"
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)

    def person_approves_meanwhile(ticket: Ticket) -> None:
        pending = queue.requests("pending")
        if (
            ran_before_approval[-1:] == ["run7-t002-rep"] and pending
        ):  # the loop ran on while the request waited
            queue.decide(pending[0].id, approve=True, by="alice")
        ran_before_approval.append(ticket.id)

    ran_before_approval: list[str] = []
    services.on_run = person_approves_meanwhile
    state = run_loop(make_graph(services, audit_log, tmp_path, approvals=queue), "run7")
    request_id = queue.requests()[0].id
    assert queue.requests()[0].status == "approved"
    assert f"{request_id}-data" in services.runs and services.runs.count(f"{request_id}-data") == 1
    assert request_id not in services.runs  # the request itself never runs
    assert state.taken_approvals == [f"{request_id}-data"]
    assert ran_before_approval[:2] == ["run7-t002", "run7-t002-rep"]  # work went on while it waited


def _escalated(tid: str, reason: str = "the reviewer doubts the gain") -> tuple[Ticket, JudgeDecision]:
    ticket = Ticket(
        id=tid,
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="a lower learning rate",
        change={"lr": 0.0005},
        budget=Budget(device_seconds=60, epochs=2),
        seed=1,
        expected_effect=ExpectedEffect(metric="iou", slice="small", direction=Direction.UP, size=0.02),
    )
    return ticket, JudgeDecision(ticket_id=tid, decision=Decision.ESCALATE, reason=reason, by="llm")


def test_an_escalation_waits_for_a_person_and_is_answered_once(audit_log: Log, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)
    ticket, decision = _escalated("run1-t004")
    item = queue.escalate(ticket, decision, "run1", pending="promote")
    assert item == "run1-t004-esc"
    assert queue.escalate(ticket, decision, "run1", pending="promote") == item  # idempotent per (run, ticket)
    assert queue.answered_escalations("run1") == []  # held: nobody answered yet
    [listed] = queue.escalations("pending")
    assert (listed.kind, listed.pending, listed.judge_reason) == (
        "escalation",
        "promote",
        "the reviewer doubts the gain",
    )
    assert (
        queue.requests() == [] and queue.approved("run1") == []
    )  # never a data request, never a data ticket
    other = ApprovalQueue(tmp_path / "state.sqlite", audit_log)  # the console or the CLI, another connection
    assert other.decide(item, approve=True, by="alice", reason="the curve looks right").status == "approved"
    with pytest.raises(UsageError, match="already approved"):
        queue.decide(item, approve=False, by="eve")
    assert queue.answered_escalations("run1") == [
        EscalationAnswer(
            id=item,
            ticket_id="run1-t004",
            pending="promote",
            approved=True,
            by="alice",
            reason="the curve looks right",
        )
    ]
    assert queue.answered_escalations("run2") == []
    [asked] = audit_log.events("escalation_requested")  # the repeat escalate wrote nothing new
    assert asked["pending"] == "promote" and asked["decision"]["decision"] == "escalate"
    [answered] = [r for r in audit_log.records() if r.event == "approval_decided"]
    assert (
        answered.actor == "human" and answered.payload["kind"] == "escalation" and answered.run_id == "run1"
    )


def test_a_denied_escalation_is_answered_and_both_kinds_are_listed(audit_log: Log, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)
    queue.request(_request("q1"), "run1")
    ticket, decision = _escalated("t1")
    first = queue.escalate(ticket, decision, "runA", pending="replicate")
    second = queue.escalate(
        ticket, decision, "runB", pending="replicate"
    )  # the same ticket id in another run
    assert first == "t1-esc" and second == "runB-t1-esc"
    assert [i.id for i in queue.items()] == ["q1", first, second]
    queue.decide(second, approve=False, by="bob", reason="seed noise")
    assert queue.answered_escalations("runB") == [
        EscalationAnswer(
            id=second, ticket_id="t1", pending="replicate", approved=False, by="bob", reason="seed noise"
        )
    ]
    assert [i.id for i in queue.items("pending")] == ["q1", first]


def test_escalate_refuses_what_is_not_an_escalation(audit_log: Log, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)
    ticket, decision = _escalated("t1")
    with pytest.raises(ValueError, match="pending must be 'promote' or 'replicate', got 'reject'"):
        queue.escalate(ticket, decision, "run1", pending="reject")
    promote = decision.model_copy(update={"decision": Decision.PROMOTE})
    with pytest.raises(ValueError, match="needs the judge's escalate decision"):
        queue.escalate(ticket, promote, "run1", pending="promote")
    assert queue.escalations() == [] and audit_log.events("escalation_requested") == []
