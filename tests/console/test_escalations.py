"""A judge's escalation is answered in the console chat, exactly as ``approvals approve|deny`` would."""

from __future__ import annotations

import re
from typing import Any

from agents.approvals import ApprovalQueue
from agents.judge import Decision, JudgeDecision
from audit import iter_records
from audit.reader import LOG_NAME
from segfactory.records import Arm, AuditRecord, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from tests.console.conftest import RUN, ConsoleHome, csrf_of

TICKET = "r1-t002"
ITEM = f"{TICKET}-esc"


def _escalate(ch: ConsoleHome, pending: str = "promote") -> ApprovalQueue:
    ticket = Ticket(
        id=TICKET,
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="a lower learning rate",
        change={"lr": 0.0005},
        budget=Budget(device_seconds=60, epochs=2),
        seed=3,
        expected_effect=ExpectedEffect(metric="dice", slice="thin", direction=Direction.UP, size=0.02),
    )
    decision = JudgeDecision(
        ticket_id=TICKET,
        decision=Decision.ESCALATE,
        by="llm",
        reason="the gain sits in one slice only; a person should look",
    )
    queue = ApprovalQueue(ch.home.state_db, ch.log)
    assert queue.escalate(ticket, decision, RUN, pending=pending) == ITEM
    return queue


def _say(client: Any, text: str) -> str:
    csrf = csrf_of(client.get(f"/approvals/{ITEM}").text)
    client.post(f"/approvals/{ITEM}/reply", data={"text": text, "csrf": csrf})
    return client.get(f"/approvals/{ITEM}").text


def _confirm(client: Any, page: str) -> str:
    message = re.findall(r'name="message_id" value="(\d+)"', page)[-1]
    client.post(f"/approvals/{ITEM}/confirm", data={"message_id": message, "csrf": csrf_of(page)})
    return client.get(f"/approvals/{ITEM}").text


def _decided(ch: ConsoleHome) -> list[AuditRecord]:
    return [r for r in iter_records(ch.home.audit / LOG_NAME) if r.event == "approval_decided"]


def test_an_escalation_is_listed_and_its_thread_says_what_approval_does(
    client: Any, console_home: ConsoleHome
) -> None:
    _escalate(console_home)
    listing = client.get("/approvals").text
    assert ITEM in listing and "escalation: promote?" in listing
    api = client.get("/api/approvals").json()
    assert [r["id"] for r in api["requests"]] == ["r1-dr1"]  # data requests keep their key
    assert [(e["id"], e["kind"], e["pending"]) for e in api["escalations"]] == [
        (ITEM, "escalation", "promote")
    ]
    page = client.get(f"/approvals/{ITEM}").text
    assert "The judge of run r1 escalated ticket r1-t002" in page and "one slice only" in page
    assert "If you approve, the coded rule promotes it" in page and 'id="approved-tickets"' not in page


def test_approving_in_the_chat_answers_the_escalation_once(client: Any, console_home: ConsoleHome) -> None:
    queue = _escalate(console_home)
    page = _say(client, "approve, the slice gain is what we wanted")
    assert "I read this as: APPROVE" in page
    assert queue.answered_escalations(RUN) == []  # nothing decided before the person confirms
    page = _confirm(client, page)
    assert "Run r1 may now promote ticket r1-t002" in page
    [answer] = queue.answered_escalations(RUN)
    assert (answer.id, answer.approved, answer.pending, answer.by) == (ITEM, True, "promote", "human:tester")
    assert "already approved" in _say(client, "approve")
    [decided] = _decided(console_home)
    assert decided.actor == "human" and decided.payload["kind"] == "escalation"


def test_a_count_means_nothing_for_an_escalation_and_a_denial_holds_the_ticket_back(
    client: Any, console_home: ConsoleHome
) -> None:
    queue = _escalate(console_home, pending="replicate")
    page = _say(client, "approve 200")
    assert "approved or denied as a whole" in page and 'name="message_id"' not in page
    page = _confirm(client, _say(client, "deny: seed noise, I think"))
    assert "Denied: seed noise, I think. Ticket r1-t002 will not replicate." in page
    [answer] = queue.answered_escalations(RUN)
    assert (answer.approved, answer.pending, answer.reason) == (False, "replicate", "seed noise, I think")


def test_an_answer_after_the_run_ended_is_recorded_and_says_nothing_follows(
    client: Any, console_home: ConsoleHome
) -> None:
    queue = _escalate(console_home)
    console_home.log.append("system", "run_end", {"stop_reason": "budget: wall"}, run_id=RUN)
    page = _confirm(client, _say(client, "approve"))
    assert "has ended (budget: wall): that run will not act on it, so ticket r1-t002 is not promoted" in page
    assert [a.approved for a in queue.answered_escalations(RUN)] == [True]  # the decision is kept
