"""The approvals queue: what waits for a person. Data requests, and the judge's escalations.

**Data requests.** Every request is a LangGraph thread (``approval:<ticket id>``) paused at ``interrupt()`` in
the same SQLite checkpoint database as the run, so the main loop never waits on it. A decision
(``segfactory approvals approve|deny ID``) resumes that thread; its node records the decision,
and an approved request becomes a ``data`` ticket that the run's next ``propose`` step takes
into its queue (once: the graph's state remembers it). A small table beside the checkpoints
indexes requests for listing.

**Escalations.** When the judge escalates (its LLM reviewer doubted a coded ``promote`` or
``replicate``), :meth:`ApprovalQueue.escalate` records an item in the ``escalations`` table with
what the coded rule would do if a person approves (``pending``). The ticket is held by the
run's graph, not here: the graph asks :meth:`ApprovalQueue.answered_escalations` at its own
steps and acts on each answer once. An escalation needs no LangGraph thread of its own: its
decision is one conditional ``UPDATE`` (``WHERE status = 'pending'``), which SQLite makes atomic
across the processes that may answer it (the console, the CLI).

Ids are shared by both kinds (an escalation's is ``<ticket id>-esc``), so ``segfactory approvals
approve|deny ID`` and the console decide either through :meth:`ApprovalQueue.decide`.

**What an approval grants** lives in the approvals record alone (:func:`read_grant`): the data
ticket the queue makes carries only the request's id (``change["approved_request"]``), and the
host reads the dataset version, count and scope from the row a person's decision wrote. Every
other ``approved_*`` key is host-owned: a proposer that writes one is refused at validation,
and one that an old request still holds is dropped when its data ticket is made.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict

from agents.judge import Decision, JudgeDecision
from segfactory.errors import UsageError
from segfactory.records import Actor, Ticket, TicketKind
from segfactory.seams import AuditSink

if TYPE_CHECKING:
    from langgraph.types import RunnableConfig

_SCHEMA = """CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, ticket TEXT NOT NULL, requested_at REAL NOT NULL,
    status TEXT NOT NULL, decided_by TEXT, reason TEXT)"""
_ESCALATIONS = """CREATE TABLE IF NOT EXISTS escalations (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, ticket_id TEXT NOT NULL, ticket TEXT NOT NULL,
    decision TEXT NOT NULL, pending TEXT NOT NULL, requested_at REAL NOT NULL, status TEXT NOT NULL,
    decided_by TEXT, reason TEXT, UNIQUE (run_id, ticket_id))"""
ESCALATION_SUFFIX = "-esc"  # an escalation's id: the escalated ticket's id plus this
# What an approval grants, beside its status: the dataset version with the data, how many images
# of it, the scope (a slice the images must fall in), and which run took it up.
_GRANT_COLUMNS = (("data_ref", "TEXT"), ("count", "INTEGER"), ("scope", "TEXT"), ("taken_by", "TEXT"))
MAX_RESUME_ATTEMPTS = 3  # resumes of a request's thread before `decide` gives up and says so
GRANT_KEY_PREFIX = "approved_"  # change keys only the host writes: what a person's approval granted
APPROVED_REQUEST_KEY = "approved_request"  # the one the data ticket carries: which request it is
DATA_TICKET_SUFFIX = "-data"  # an approved request's data ticket: the request's id plus this


Pending = Literal["promote", "replicate"]


class ApprovalRequest(BaseModel):
    """One item a person decides: a data request, or an escalation of ``ticket`` by the judge."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    run_id: str
    ticket: Ticket
    requested_at: float
    status: Literal["pending", "approved", "denied"]
    decided_by: str | None = None
    reason: str | None = None
    kind: Literal["data_request", "escalation"] = "data_request"
    pending: Pending | None = None  # escalations: what approving lets the coded rule do
    judge_reason: str | None = None  # escalations: why the judge escalated


class EscalationAnswer(BaseModel):
    """A person's answer to an escalation, as the run's graph takes it (once per id)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    ticket_id: str
    pending: Pending
    approved: bool
    by: str
    reason: str


class Grant(BaseModel):
    """What a person's decision on one data request granted, as the approvals record holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    request_id: str
    run_id: str
    status: Literal["pending", "approved", "denied"]
    data: str | None = None  # the dataset version with the approved images (NAME/vK)
    count: int | None = None  # at most this many of them
    scope: str | None = None  # a slice their voids must fall in
    taken_by: str | None = None  # the run that took the approved request up


def data_ticket_id(request_id: str) -> str:
    """The id of the data ticket an approved request becomes."""
    return f"{request_id}{DATA_TICKET_SUFFIX}"


def grant_keys(change: Mapping[str, object]) -> list[str]:
    """The host-owned ``approved_*`` keys in ``change``, sorted."""
    return sorted(str(k) for k in change if str(k).startswith(GRANT_KEY_PREFIX))


def read_grant(db: Path, request_id: str) -> Grant | None:
    """The approvals record of ``request_id``; None when the database, the table or the row is
    missing. Opened read-only, so reading creates nothing."""
    if not Path(db).is_file():
        return None
    conn = sqlite3.connect(f"file:{Path(db).resolve()}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute(
            "SELECT id, run_id, status, data_ref, count, scope, taken_by FROM approvals WHERE id = ?",
            (request_id,),
        ).fetchone()
    except sqlite3.OperationalError:  # no approvals table (or an old one without the grant columns)
        return None
    finally:
        conn.close()
    if row is None:
        return None
    keys = ("request_id", "run_id", "status", "data", "count", "scope", "taken_by")
    return Grant.model_validate(dict(zip(keys, row, strict=True)))


class _Decision(TypedDict):
    """What ``decide`` resumes a request's thread with (``Command(resume=...)``)."""

    approve: bool
    by: str
    reason: str


class _State(TypedDict, total=False):
    id: str
    decision: _Decision


class ApprovalQueue:
    """Requests, decisions and approved tickets, all in ``db`` (the run's checkpoint database).

    The checkpointer and the ``approvals`` table use separate connections: LangGraph commits
    its own connection from whichever thread runs a node, so a shared one would let its commit
    land in the middle of ours. Table access is serialised by a lock and runs in one transaction.
    """

    def __init__(self, db: Path, sink: AuditSink) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        self.conn = sqlite3.connect(db, check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._table() as table:
            table.execute(_SCHEMA)
            table.execute(_ESCALATIONS)
            present = {row[1] for row in table.execute("PRAGMA table_info(approvals)")}
            for column, kind in _GRANT_COLUMNS:  # added after the first release: old homes gain them
                if column not in present:
                    table.execute(f"ALTER TABLE approvals ADD COLUMN {column} {kind}")
        self.sink = sink
        graph = StateGraph(_State)
        graph.add_node("await_decision", self._await_decision)
        graph.add_edge(START, "await_decision")
        graph.add_edge("await_decision", END)
        saver_conn = sqlite3.connect(db, check_same_thread=False, timeout=30)
        self.graph: Any = graph.compile(checkpointer=SqliteSaver(saver_conn))

    @contextmanager
    def _table(self) -> Iterator[sqlite3.Connection]:
        """The table's connection, locked, inside one transaction (committed on success)."""
        with self._lock, self.conn:
            yield self.conn

    def _await_decision(self, state: _State) -> _State:
        from langgraph.types import interrupt

        decision: _Decision = interrupt({"approval": state["id"]})
        status = "approved" if decision["approve"] else "denied"
        with self._table() as table:
            table.execute(
                "UPDATE approvals SET status = ?, decided_by = ?, reason = ? WHERE id = ?",
                (status, decision["by"], decision.get("reason", ""), state["id"]),
            )
        return {"decision": decision}

    @staticmethod
    def _config(request_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": f"approval:{request_id}"}}

    def request(self, ticket: Ticket, run_id: str) -> str:
        """Queue a ``data_request`` ticket; returns at once (the thread pauses at its interrupt)."""
        if ticket.kind is not TicketKind.DATA_REQUEST:
            raise ValueError(f"only data_request tickets need approval, got {ticket.kind.value}")
        with self._table() as table:
            table.execute(
                "INSERT OR IGNORE INTO approvals (id, run_id, ticket, requested_at, status) "
                "VALUES (?, ?, ?, ?, 'pending')",
                (ticket.id, run_id, ticket.model_dump_json(), time.time()),
            )
        self.graph.invoke({"id": ticket.id}, self._config(ticket.id), durability="sync")
        self.sink.append(
            Actor.SYSTEM.value,
            "approval_requested",
            {"id": ticket.id, "hypothesis": ticket.hypothesis},
            run_id=run_id,
        )
        return ticket.id

    def requests(self, status: str | None = None) -> list[ApprovalRequest]:
        with self._table() as table:
            rows = table.execute(
                "SELECT id, run_id, ticket, requested_at, status, decided_by, reason "
                "FROM approvals ORDER BY requested_at"
            ).fetchall()
        requests = [
            ApprovalRequest(
                id=r[0],
                run_id=r[1],
                ticket=Ticket.model_validate_json(r[2]),
                requested_at=r[3],
                status=r[4],
                decided_by=r[5],
                reason=r[6],
            )
            for r in rows
        ]
        return [r for r in requests if status is None or r.status == status]

    def items(self, status: str | None = None) -> list[ApprovalRequest]:
        """Everything a person decides, both kinds, oldest first."""
        return sorted([*self.requests(status), *self.escalations(status)], key=lambda r: r.requested_at)

    def decide(
        self,
        request_id: str,
        *,
        approve: bool,
        by: str,
        reason: str = "",
        data: str | None = None,
        count: int | None = None,
        scope: str | None = None,
    ) -> ApprovalRequest:
        """Decide a data request (resuming its own thread) or an escalation; each is decided once.

        Approving a data request may grant ``data`` (a dataset version ref with the images), a
        ``count`` (at most that many of them) and a ``scope`` (a slice they must fall in, such as
        ``shape=shrinkage``); the data ticket trains on exactly that.
        """
        if count is not None and count < 1:
            raise UsageError(f"an approved count must be at least 1; got {count}")
        if any(e.id == request_id for e in self.escalations()):
            return self._decide_escalation(request_id, approve=approve, by=by, reason=reason)
        found = [r for r in self.requests() if r.id == request_id]
        if not found:
            raise UsageError(f"no approval request {request_id!r}; see `segfactory approvals list`")
        if found[0].status != "pending":
            raise UsageError(f"approval request {request_id!r} was already {found[0].status}")
        from langgraph.types import Command

        decided = found[0]
        for _ in range(
            MAX_RESUME_ATTEMPTS
        ):  # a resume that did not reach the interrupt is retried, boundedly
            self.graph.invoke(
                Command(resume=_Decision(approve=approve, by=by, reason=reason)),
                self._config(request_id),
                durability="sync",
            )
            decided = [r for r in self.requests() if r.id == request_id][0]
            if decided.status != "pending":
                break
        if decided.status == "pending":
            raise UsageError(
                f"approval request {request_id!r}: its thread did not take the decision after "
                f"{MAX_RESUME_ATTEMPTS} attempts; nothing was decided, try again"
            )
        if decided.status == "approved" and (data or count or scope):
            with self._table() as table:
                table.execute(
                    "UPDATE approvals SET data_ref = ?, count = ?, scope = ? WHERE id = ?",
                    (data, count, scope, request_id),
                )
        self.sink.append(
            Actor.HUMAN.value,
            "approval_decided",
            {
                "id": request_id,
                "status": decided.status,
                "by": by,
                "reason": reason,
                "data": data,
                "count": count,
                "scope": scope,
            },
            run_id=decided.run_id,
        )
        return decided

    def approved(self, run_id: str) -> list[Ticket]:
        """Approved requests ``run_id`` may take up, as ``data`` tickets (id ``<request id>-data``):
        its own, and those of earlier runs that no run took up (approved after their run ended).

        Idempotent: the caller (the graph) remembers in its checkpointed state which it took, and
        :meth:`take` marks a request as taken by one run, so none is queued twice.
        """
        with self._table() as table:
            rows = table.execute(
                "SELECT ticket FROM approvals WHERE status = 'approved' "
                "AND (run_id = ? OR taken_by IS NULL OR taken_by = ?) ORDER BY requested_at",
                (run_id, run_id),
            ).fetchall()
            taken = {r[0]: r[1] for r in table.execute("SELECT id, taken_by FROM approvals").fetchall()}
        tickets = [_as_data_ticket(Ticket.model_validate_json(r[0])) for r in rows]
        return [t for t in tickets if taken.get(t.change[APPROVED_REQUEST_KEY]) in (None, run_id)]

    def taken(self) -> dict[str, str]:
        """Which run took up each approved request: request id -> run id (requests none took: absent)."""
        with self._table() as table:
            rows = table.execute("SELECT id, taken_by FROM approvals WHERE taken_by IS NOT NULL").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def take(self, request_id: str, run_id: str) -> bool:
        """Mark an approved request as taken up by ``run_id``; False when another run has it."""
        with self._table() as table:
            table.execute(
                "UPDATE approvals SET taken_by = ? WHERE id = ? AND taken_by IS NULL", (run_id, request_id)
            )
            row = table.execute("SELECT taken_by FROM approvals WHERE id = ?", (request_id,)).fetchone()
        return row is not None and row[0] == run_id

    # --- escalations ---------------------------------------------------------------------------

    def escalate(self, ticket: Ticket, decision: JudgeDecision, run_id: str, *, pending: str) -> str:
        """Record the judge's escalation of ``ticket`` for a person; returns the item's id.

        ``pending`` is what the coded rule would do on approval (``promote`` or ``replicate``).
        Idempotent per (``run_id``, ``ticket.id``): a resumed run that escalates again gets the
        same id, and the first record (and any answer to it) stands.
        """
        if pending not in ("promote", "replicate"):
            raise ValueError(f"pending must be 'promote' or 'replicate', got {pending!r}")
        if decision.decision is not Decision.ESCALATE or decision.ticket_id != ticket.id:
            raise ValueError(
                f"escalate needs the judge's escalate decision for ticket {ticket.id!r}, got "
                f"{decision.decision.value} for {decision.ticket_id!r}"
            )
        with self._table() as table:
            row = table.execute(
                "SELECT id FROM escalations WHERE run_id = ? AND ticket_id = ?", (run_id, ticket.id)
            ).fetchone()
            if row is not None:
                return str(row[0])
            item_id = _escalation_id(table, run_id, ticket.id)
            table.execute(
                "INSERT INTO escalations (id, run_id, ticket_id, ticket, decision, pending, requested_at, "
                "status) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending')",
                (
                    item_id,
                    run_id,
                    ticket.id,
                    ticket.model_dump_json(),
                    decision.model_dump_json(),
                    pending,
                    time.time(),
                ),
            )
        self.sink.append(
            Actor.JUDGE.value,
            "escalation_requested",
            {
                "id": item_id,
                "ticket": ticket.id,
                "pending": pending,
                "decision": decision.model_dump(mode="json"),
            },
            run_id=run_id,
        )
        return item_id

    def escalations(self, status: str | None = None) -> list[ApprovalRequest]:
        with self._table() as table:
            rows = table.execute(
                "SELECT id, run_id, ticket, decision, pending, requested_at, status, decided_by, "
                "reason FROM escalations ORDER BY requested_at"
            ).fetchall()
        items = [
            ApprovalRequest(
                id=r[0],
                run_id=r[1],
                ticket=Ticket.model_validate_json(r[2]),
                kind="escalation",
                judge_reason=JudgeDecision.model_validate_json(r[3]).reason,
                pending=r[4],
                requested_at=r[5],
                status=r[6],
                decided_by=r[7],
                reason=r[8],
            )
            for r in rows
        ]
        return [e for e in items if status is None or e.status == status]

    def answered_escalations(self, run_id: str) -> list[EscalationAnswer]:
        """The answered escalations of ``run_id``, oldest first (the caller takes each once)."""
        return [
            EscalationAnswer(
                id=e.id,
                ticket_id=e.ticket.id,
                pending=e.pending or "promote",
                approved=e.status == "approved",
                by=e.decided_by or "",
                reason=e.reason or "",
            )
            for e in self.escalations()
            if e.run_id == run_id and e.status != "pending"
        ]

    def _decide_escalation(self, item_id: str, *, approve: bool, by: str, reason: str) -> ApprovalRequest:
        status = "approved" if approve else "denied"
        with self._table() as table:
            changed = table.execute(
                "UPDATE escalations SET status = ?, decided_by = ?, reason = ? "
                "WHERE id = ? AND status = 'pending'",
                (status, by, reason, item_id),
            ).rowcount
        decided = [e for e in self.escalations() if e.id == item_id][0]
        if not changed:
            raise UsageError(f"escalation {item_id!r} was already {decided.status}")
        self.sink.append(
            Actor.HUMAN.value,
            "approval_decided",
            {
                "id": item_id,
                "kind": "escalation",
                "ticket": decided.ticket.id,
                "pending": decided.pending,
                "status": status,
                "by": by,
                "reason": reason,
            },
            run_id=decided.run_id,
        )
        return decided


def _escalation_id(table: sqlite3.Connection, run_id: str, ticket_id: str) -> str:
    """``<ticket id>-esc``, unless another run already holds that id (ticket ids are per run)."""
    item_id = f"{ticket_id}{ESCALATION_SUFFIX}"
    taken = table.execute(
        "SELECT 1 FROM escalations WHERE id = ? UNION SELECT 1 FROM approvals WHERE id = ?",
        (item_id, item_id),
    ).fetchone()
    return f"{run_id}-{item_id}" if taken else item_id


def _as_data_ticket(request: Ticket) -> Ticket:
    """The data ticket of an approved request: its change names the request and nothing it was
    granted (the host reads that from the record); ``approved_*`` keys the request held are dropped."""
    change = {k: v for k, v in request.change.items() if not str(k).startswith(GRANT_KEY_PREFIX)}
    return request.model_copy(
        update={
            "id": data_ticket_id(request.id),
            "kind": TicketKind.DATA,
            "change": {**change, APPROVED_REQUEST_KEY: request.id},
        }
    )


__all__ = [
    "APPROVED_REQUEST_KEY",
    "GRANT_KEY_PREFIX",
    "ApprovalQueue",
    "ApprovalRequest",
    "EscalationAnswer",
    "Grant",
    "data_ticket_id",
    "grant_keys",
    "read_grant",
]
