"""The approvals desk: one chat thread per item, decisions through ``agents.approvals``.

An item is a data request (the proposer asks for new data) or an escalation (the judge's LLM
reviewer doubted a coded promote or replicate, and a person decides; the run holds the ticket
until then). The factory's opening message (the request and its evidence, or the escalated
ticket and the judge's reason) starts each thread. A person's
reply is read by :func:`console._chat.interpret` and the reading is confirmed back; only a
confirmed approve/deny calls ``ApprovalQueue.decide`` (the same call as ``segfactory approvals
approve|deny``), which resumes the request's own LangGraph thread. Every reply and every
decision is an audit record (actor ``human``). Chat messages live in ``console_chat`` in the
home's ``state.sqlite``, beside the approvals table, so no reply or decision is lost.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict

from agents.approvals import ApprovalQueue, ApprovalRequest
from console._chat import MAX_REPLY_CHARS, Reading
from console._interpret import Interpreter, RulesInterpreter
from console._runs import run_ended, run_state
from segfactory.errors import LimitExceeded, UsageError
from segfactory.home import Home
from segfactory.records import Actor, Ticket

_SCHEMA = """CREATE TABLE IF NOT EXISTS console_chat (
    id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, ts REAL NOT NULL,
    author TEXT NOT NULL, text TEXT NOT NULL, reading TEXT, pending INTEGER NOT NULL DEFAULT 0)"""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: int
    request_id: str
    ts: float
    author: str  # factory | person | console
    text: str
    reading: Reading | None = None
    pending: bool = False  # a reading awaiting the person's confirmation


class QueuedTicket(TypedDict):
    """An approved data ticket of a run, and whether the run has taken it into its queue."""

    ticket: Ticket
    taken: bool


class ApprovalsDesk:
    """Chat threads over an :class:`ApprovalQueue`; thread-safe."""

    def __init__(
        self, home: Home, queue: ApprovalQueue, sink: Any, interpreter: Interpreter | None = None
    ) -> None:
        self.home, self.queue, self.sink = home, queue, sink
        self.interpreter = interpreter or RulesInterpreter()
        self.conn = sqlite3.connect(home.state_db, check_same_thread=False, timeout=30)
        self.conn.execute(_SCHEMA)
        self.conn.commit()
        self._lock = threading.Lock()

    def requests(self) -> list[ApprovalRequest]:
        """Both kinds, oldest first."""
        return self.queue.items()

    def request(self, request_id: str) -> ApprovalRequest:
        found = [r for r in self.queue.items() if r.id == request_id]
        if not found:
            raise UsageError(f"no approval request {request_id!r}; see the approvals list")
        return found[0]

    def thread(self, request_id: str) -> list[ChatMessage]:
        """The request's messages, oldest first; the factory's opening message is made once."""
        request = self.request(request_id)
        with self._lock:
            if not self._messages(request_id):
                self._add(request_id, "factory", _opening(request))
            return self._messages(request_id)

    def reply(self, request_id: str, text: str, by: str) -> ChatMessage:
        """Store the person's reply, read it, and answer; returns the console's answer."""
        if len(text) > MAX_REPLY_CHARS:
            raise LimitExceeded(
                f"a reply holds at most {MAX_REPLY_CHARS} characters, got {len(text)}; "
                "shorten it (nothing was read from it)"
            )
        request = self.request(request_id)
        opening = self.thread(request_id)[0].text
        reading = self.interpreter.read(opening, text)
        self.sink.append(
            Actor.HUMAN.value,
            "approval_reply",
            {"id": request_id, "by": by, "text": text, "reading": reading.model_dump()},
            run_id=request.run_id,
        )
        with self._lock:
            self.conn.execute("UPDATE console_chat SET pending = 0 WHERE request_id = ?", (request_id,))
            self._add(request_id, "person", text)
            answer, pending = _answer(request, reading, self._ended(request))
            return self._add(request_id, "console", answer, reading if pending else None, pending)

    def confirm(self, request_id: str, message_id: int, by: str) -> ChatMessage:
        """Act on a confirmed reading: decide the request and say what happened."""
        request = self.request(request_id)
        with self._lock:
            row = self.conn.execute(
                "SELECT reading FROM console_chat WHERE id = ? AND request_id = ? AND pending = 1",
                (message_id, request_id),
            ).fetchone()
            if row is None:
                return self._add(
                    request_id,
                    "console",
                    "That reading was already confirmed or replaced by a newer "
                    f"reply; the request is {request.status}.",
                )
            self.conn.execute("UPDATE console_chat SET pending = 0 WHERE id = ?", (message_id,))
            self.conn.commit()  # consumed before deciding: a second confirmation finds nothing to act on
            reading = Reading.model_validate_json(row[0])
            return self._add(request_id, "console", self._decide(request, reading, by))

    def cancel(self, request_id: str, message_id: int) -> ChatMessage:
        with self._lock:
            self.conn.execute(
                "UPDATE console_chat SET pending = 0 WHERE id = ? AND request_id = ?",
                (message_id, request_id),
            )
            return self._add(request_id, "console", "Cancelled; nothing was decided. Reply again when ready.")

    def queued(self, run_id: str) -> list[QueuedTicket]:
        """The run's approved data tickets and whether the run has taken them into its queue."""

        taken = set(run_state(self.home, run_id).taken_approvals)
        return [{"ticket": t, "taken": t.id in taken} for t in self.queue.approved(run_id)]

    def _decide(self, request: ApprovalRequest, reading: Reading, by: str) -> str:
        """Decide exactly as ``segfactory approvals approve|deny`` does, then say what follows."""
        try:
            data_request = request.kind != "escalation"
            decided = self.queue.decide(
                request.id,
                approve=reading.kind == "approve",
                by=by,
                reason=reading.decision_reason(),
                count=reading.count if data_request else None,
                scope=(reading.scope or None) if data_request else None,
            )
        except UsageError as exc:
            return f"Nothing changed: {exc}."
        if decided.status == "pending":  # never report an undecided request as denied
            return f"Nothing changed: request {request.id} is still pending; try again."
        if decided.status != "approved":
            closed = (
                f"Ticket {request.ticket.id} will not {request.pending}."
                if request.kind == "escalation"
                else "The request is closed."
            )
            return f"Denied{': ' + reading.reason if reading.reason else ''}. {closed}"
        ended = self._ended(request)
        if request.kind == "escalation":
            return _escalation_approved(request, ended)
        if ended is not None:
            return (
                f"Approved and recorded, but run {request.run_id} has ended ({ended}): its data ticket "
                f"{request.id}-data will not run in it (carrying it into a new run is not built yet)."
            )
        return (
            f"Approved. Data ticket {request.id}-data is queued for run {request.run_id}; the run takes it "
            "at its next propose step."
        )

    def _ended(self, request: ApprovalRequest) -> str | None:
        return run_ended(self.home, request.run_id)

    def _messages(self, request_id: str) -> list[ChatMessage]:
        rows = self.conn.execute(
            "SELECT id, request_id, ts, author, text, reading, pending FROM console_chat "
            "WHERE request_id = ? ORDER BY id",
            (request_id,),
        ).fetchall()
        return [
            ChatMessage(
                id=r[0],
                request_id=r[1],
                ts=r[2],
                author=r[3],
                text=r[4],
                reading=Reading.model_validate_json(r[5]) if r[5] else None,
                pending=bool(r[6]),
            )
            for r in rows
        ]

    def _add(
        self, request_id: str, author: str, text: str, reading: Reading | None = None, pending: bool = False
    ) -> ChatMessage:
        self.conn.execute(
            "INSERT INTO console_chat (request_id, ts, author, text, reading, pending) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                request_id,
                time.time(),
                author,
                text,
                reading.model_dump_json() if reading else None,
                int(pending),
            ),
        )
        self.conn.commit()
        return self._messages(request_id)[-1]


def _escalation_approved(request: ApprovalRequest, ended: str | None) -> str:
    if ended is not None:
        return (
            f"Approved and recorded, but run {request.run_id} has ended ({ended}): that run will not act on "
            f"it, so ticket {request.ticket.id} is not "
            f"{'promoted' if request.pending == 'promote' else 'replicated'}."
        )
    return (
        f"Approved. Run {request.run_id} may now {request.pending} ticket {request.ticket.id}; it takes the "
        "answer when it next proposes (its queue empty)."
    )


def _opening(request: ApprovalRequest) -> str:
    if request.kind == "escalation":
        return _escalation_opening(request)
    t = request.ticket
    lines = [
        f"Run {request.run_id} asks for new data (request {request.id}).",
        f"Hypothesis: {t.hypothesis}",
        f"Change: {json.dumps(t.change, sort_keys=True)}",
        f"Expected effect: {t.expected_effect.metric} on {t.expected_effect.slice}, "
        f"{t.expected_effect.direction.value} by {t.expected_effect.size}",
        f"Budget: {t.budget.device_seconds:g} device-seconds, {t.budget.epochs} epochs",
    ]
    lines += [f"Evidence: {e}" for e in t.evidence]
    lines.append(
        "Reply in your own words: 'approve', 'approve 200, thin voids only', 'deny: reason', or ask."
    )
    return "\n".join(lines)


def _escalation_opening(request: ApprovalRequest) -> str:
    t = request.ticket
    then = (
        "promotes it: its model becomes the global best"
        if request.pending == "promote"
        else "trains a replicate with a host-chosen seed and submits it to confirm-b"
    )
    return "\n".join(
        [
            f"The judge of run {request.run_id} escalated ticket {t.id} to a person (item {request.id}).",
            f"Why: {request.judge_reason}",
            f"Hypothesis: {t.hypothesis}",
            f"Change: {json.dumps(t.change, sort_keys=True)}",
            f"If you approve, the coded rule {then}. If you deny, it does not, and the ticket is rejected.",
            "Reply 'approve' or 'deny: reason', or ask.",
        ]
    )


def _answer(request: ApprovalRequest, reading: Reading, ended: str | None) -> tuple[str, bool]:
    """The console's answer to a reading, and whether it awaits confirmation."""
    if request.status != "pending":
        return (
            f"This request was already {request.status}"
            f"{' by ' + request.decided_by if request.decided_by else ''}; nothing more to decide.",
            False,
        )
    if reading.kind == "question":
        return (
            "I can only tell you what the request says (above): its hypothesis, evidence, change and budget. "
            f"When you have decided, reply {_choices(request)}.",
            False,
        )
    if reading.kind == "unclear":
        return (
            f"I am not sure what you mean ({reading.why_unclear}). Do you approve or deny request "
            f"{request.id}? Reply {_choices(request)}.",
            False,
        )
    if request.kind == "escalation" and reading.count is not None:
        return (
            f"An escalation is approved or denied as a whole; a count of images means nothing here. Do you "
            f"approve or deny {request.id}? Reply {_choices(request)}.",
            False,
        )
    note = (
        f" Note: run {request.run_id} has ended ({ended}), so its queue takes no new tickets."
        if ended
        else ""
    )
    by = "the LLM" if reading.by == "llm" else "the rules"
    return (
        f"I read this as: {reading.summary()} for request {request.id} (read by {by}). Confirm?{note}",
        True,
    )


def _choices(request: ApprovalRequest) -> str:
    if request.kind == "escalation":
        return "'approve' or 'deny: reason'"
    return "'approve', 'approve 200, thin voids only' or 'deny: reason'"
