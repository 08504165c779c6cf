"""The one global query ledger (trust rule 5), SQLite at ``vault/ledger.sqlite``.

It holds tier versions and their budgets, every query (ticket, model hash, time, tier version,
verdict, the reason for people), the verdict cache keyed by (model hash, tier version),
milestones and their quota, the history of the current best, chain anchors, quarantines, the
answer time each served gate fixed at its start (and how), and the queue of audit events waiting
for the host's writer.

Every mutation is one ``BEGIN IMMEDIATE`` transaction in WAL mode with ``synchronous=FULL``, so
a ``kill -9`` leaves either the whole change or none of it. A query spends its budget in the
same transaction that records it (verdict ``PENDING``) *before* scoring, so crashing the gate
mid-score never refunds a query.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from gate.replies import AnswerTime, Quarantine, TierState

PENDING = "PENDING"
_EVENTS_LAST_ID = "events.last_id"  # meta key: the last event id issued
_EVENTS_DELIVERED = "events.delivered"  # meta key: the highest event id handed to a reader

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tier_versions (
    tier TEXT NOT NULL, version INTEGER NOT NULL, budget INTEGER NOT NULL,
    spent INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL, PRIMARY KEY (tier, version));
CREATE TABLE IF NOT EXISTS queries (
    id INTEGER PRIMARY KEY, ticket_id TEXT NOT NULL UNIQUE, tier TEXT NOT NULL,
    version INTEGER NOT NULL, model_sha256 TEXT NOT NULL, ts REAL NOT NULL,
    verdict TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', replicate_of TEXT, run_id TEXT, best_sha256 TEXT);
CREATE TABLE IF NOT EXISTS verdict_cache (
    model_sha256 TEXT NOT NULL, tier TEXT NOT NULL, version INTEGER NOT NULL, best_sha256 TEXT NOT NULL,
    verdict TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (model_sha256, tier, version, best_sha256));
CREATE TABLE IF NOT EXISTS milestones (
    name TEXT PRIMARY KEY, run_id TEXT NOT NULL, ts REAL NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS milestone_scores (
    tier TEXT NOT NULL, version INTEGER NOT NULL, model_sha256 TEXT NOT NULL, milestone TEXT NOT NULL,
    PRIMARY KEY (tier, version, model_sha256));
CREATE TABLE IF NOT EXISTS best (
    id INTEGER PRIMARY KEY, model_sha256 TEXT NOT NULL, model_path TEXT NOT NULL,
    ts REAL NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS anchors (
    id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL, run_id TEXT, ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, event TEXT NOT NULL, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY, run_id TEXT, ticket_id TEXT, ts REAL NOT NULL, reason TEXT NOT NULL,
    cleared INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS answer_times (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, pid INTEGER NOT NULL, record TEXT NOT NULL);
"""
# ``answer_times`` is created by IF NOT EXISTS like every table, so a ledger written before it
# existed gains it on first open; each row is one gate start's ``AnswerTime`` as JSON.


class LedgerError(Exception):
    """A ledger rule was broken (replayed milestone name, quota spent, unknown tier version)."""


@dataclass(frozen=True)
class QueryRow:
    ticket_id: str
    tier: str
    version: int
    model_sha256: str
    verdict: str
    reason: str
    replicate_of: str | None
    best_sha256: str | None = None  # the best the verdict compared against (promotion checks it)


class BestRow(TypedDict):
    """The current best as the ledger keeps it: the model's hash, the host path it was read from,
    when it became the best and how (``init``, ``promotion``, ``retraction`` or ``reference``)."""

    model_sha256: str
    model_path: str
    ts: float
    kind: str


class BestMove(BestRow):
    """One move of the best in its history, with the reason recorded for it."""

    reason: str


class AnchorRow(TypedDict):
    """One stored anchor of the host's audit chain (``GET /anchor``, ``GET /anchor/history``)."""

    seq: int
    hash: str
    ts: float
    run_id: str | None


class QueuedEvent(TypedDict):
    """An audit event queued for the host's writer, as ``GET /audit/events`` hands it out."""

    id: int
    ts: float
    event: str
    payload: dict[str, object]  # the event's body, written to the audit log as it is


class Ledger:
    """The gate's ledger. One connection per object; safe across processes via SQLite locking."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._add_missing_columns()
        self._lock = threading.RLock()  # one connection shared by the service's threads

    def _add_missing_columns(self) -> None:
        """A ledger written before ``queries.best_sha256`` existed gains it (NULL: compared with no known
        best)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(queries)")}
        if "best_sha256" not in columns:
            self._db.execute("ALTER TABLE queries ADD COLUMN best_sha256 TEXT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic, immediate transaction: all of it lands or none of it."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        with self._lock:
            return self._db.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # -- meta ---------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- tier versions ------------------------------------------------------------------------
    def add_tier_version(self, tier: str, version: int, budget: int) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO tier_versions (tier, version, budget, created) VALUES (?, ?, ?, ?)",
                (tier, version, budget, time.time()),
            )

    def budget_left(self, tier: str, version: int) -> int:
        row = self._one(
            "SELECT budget - spent FROM tier_versions WHERE tier = ? AND version = ?", (tier, version)
        )
        if row is None:
            raise LedgerError(f"tier {tier} version {version} is not registered in the ledger")
        return max(int(row[0]), 0)

    def tier_versions(self) -> list[TierState]:
        rows = self._all("SELECT tier, version, budget, spent FROM tier_versions ORDER BY tier, version")
        return [TierState(tier=t, version=v, budget=b, spent=s, left=max(b - s, 0)) for t, v, b, s in rows]

    # -- queries ------------------------------------------------------------------------------
    def find_query(self, ticket_id: str) -> QueryRow | None:
        row = self._one(
            "SELECT ticket_id, tier, version, model_sha256, verdict, reason, replicate_of, best_sha256 "
            "FROM queries WHERE ticket_id = ?",
            (ticket_id,),
        )
        return None if row is None else QueryRow(*row)

    def reserve_query(
        self,
        ticket_id: str,
        tier: str,
        version: int,
        model_sha256: str,
        replicate_of: str | None = None,
        run_id: str | None = None,
    ) -> bool:
        """Spend one query and record it as PENDING; False (nothing spent) when the budget is gone."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT budget - spent FROM tier_versions WHERE tier = ? AND version = ?", (tier, version)
            ).fetchone()
            if row is None or row[0] <= 0:
                return False
            db.execute(
                "UPDATE tier_versions SET spent = spent + 1 WHERE tier = ? AND version = ?", (tier, version)
            )
            db.execute(
                "INSERT INTO queries "
                "(ticket_id, tier, version, model_sha256, ts, verdict, replicate_of, run_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (ticket_id, tier, version, model_sha256, time.time(), PENDING, replicate_of, run_id),
            )
        return True

    def record_refusal(
        self, ticket_id: str, tier: str, version: int, model_sha256: str, verdict: str, reason: str
    ) -> None:
        """Record a query that spent nothing (budget exhausted) so the ticket id replays it."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO queries (ticket_id, tier, version, model_sha256, ts, verdict, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ticket_id, tier, version, model_sha256, time.time(), verdict, reason),
            )

    def finish_query(
        self, ticket_id: str, verdict: str, reason: str, cache: bool = True, best_sha256: str = ""
    ) -> None:
        """Set a PENDING query's verdict and the best it compared against (and cache it by model hash,
        tier version and best)."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT model_sha256, tier, version FROM queries WHERE ticket_id = ?", (ticket_id,)
            ).fetchone()
            if row is None:
                raise LedgerError(f"no query for ticket {ticket_id}")
            db.execute(
                "UPDATE queries SET verdict = ?, reason = ?, best_sha256 = ? WHERE ticket_id = ?",
                (verdict, reason, best_sha256, ticket_id),
            )
            if cache:
                db.execute(
                    "INSERT OR IGNORE INTO verdict_cache VALUES (?, ?, ?, ?, ?, ?)",
                    (*row, best_sha256, verdict, reason),
                )

    def cached_verdict(
        self, model_sha256: str, tier: str, version: int, best_sha256: str = ""
    ) -> tuple[str, str] | None:
        """The verdict for this model on this tier version against this best, if one was reached."""
        row = self._one(
            "SELECT verdict, reason FROM verdict_cache WHERE model_sha256 = ? AND tier = ? AND version = ? "
            "AND best_sha256 = ?",
            (model_sha256, tier, version, best_sha256),
        )
        return None if row is None else (str(row[0]), str(row[1]))

    def queries(self) -> list[QueryRow]:
        rows = self._all(
            "SELECT ticket_id, tier, version, model_sha256, verdict, reason, replicate_of, best_sha256 "
            "FROM queries ORDER BY id"
        )
        return [QueryRow(*r) for r in rows]

    # -- current best -------------------------------------------------------------------------
    def set_best(self, model_sha256: str, model_path: str, kind: str, reason: str) -> None:
        """Move the global best; ``kind`` is ``init``, ``promotion``, ``retraction`` or ``reference``
        (an A/A run's reference model, recorded as such: it never counts as a promotion)."""
        if kind not in {"init", "promotion", "retraction", "reference"}:
            raise LedgerError(
                f"the best moves only on init, promotion, retraction or reference; got {kind!r}"
            )
        with self.transaction() as db:
            db.execute(
                "INSERT INTO best (model_sha256, model_path, ts, kind, reason) VALUES (?, ?, ?, ?, ?)",
                (model_sha256, model_path, time.time(), kind, reason),
            )

    def current_best(self) -> BestRow | None:
        row = self._one("SELECT model_sha256, model_path, ts, kind FROM best ORDER BY id DESC LIMIT 1")
        if row is None:
            return None
        sha, path, ts, kind = row
        return {"model_sha256": sha, "model_path": path, "ts": ts, "kind": kind}

    def best_history(self) -> list[BestMove]:
        """Every move of the global best, oldest first (read-only; used to undo a retracted promotion)."""
        return [
            {"model_sha256": sha, "model_path": path, "ts": ts, "kind": kind, "reason": reason}
            for sha, path, ts, kind, reason in self._all(
                "SELECT model_sha256, model_path, ts, kind, reason FROM best ORDER BY id"
            )
        ]

    # -- milestones ---------------------------------------------------------------------------
    def start_milestone(self, name: str, run_id: str, detail: Mapping[str, object]) -> None:
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM milestones WHERE name = ?", (name,)).fetchone():
                raise LedgerError(f"milestone name {name!r} was already used; a name is used once")
            db.execute(
                "INSERT INTO milestones VALUES (?, ?, ?, ?)", (name, run_id, time.time(), json.dumps(detail))
            )

    def milestone_models(self, tier: str, version: int) -> set[str]:
        rows = self._all(
            "SELECT model_sha256 FROM milestone_scores WHERE tier = ? AND version = ?", (tier, version)
        )
        return {str(r[0]) for r in rows}

    def count_milestone_model(
        self, tier: str, version: int, model_sha256: str, milestone: str, quota: int
    ) -> None:
        """Count one model scored on a sealed version; raises past ``quota`` (a re-score is free)."""
        with self.transaction() as db:
            seen = {
                r[0]
                for r in db.execute(
                    "SELECT model_sha256 FROM milestone_scores WHERE tier = ? AND version = ?",
                    (tier, version),
                )
            }
            if model_sha256 in seen:
                return
            if len(seen) >= quota:
                raise LedgerError(
                    f"milestone quota spent on {tier} v{version}: {len(seen)} of {quota} models scored; "
                    f"a person must rotate the tier (`segfactory gate rotate --tier {tier}`)"
                )
            db.execute(
                "INSERT INTO milestone_scores VALUES (?, ?, ?, ?)", (tier, version, model_sha256, milestone)
            )

    # -- anchors ------------------------------------------------------------------------------
    def put_anchor(self, seq: int, digest: str, run_id: str | None) -> None:
        """Append an anchor. A log only grows, so an anchor behind the latest one (a lower seq, or
        the same seq with another hash) means the log was cut or rewritten: LedgerError, nothing kept."""
        with self.transaction() as db:
            last = db.execute("SELECT seq, hash FROM anchors ORDER BY id DESC LIMIT 1").fetchone()
            if last is not None and (seq < int(last[0]) or (seq == int(last[0]) and digest != str(last[1]))):
                raise LedgerError(
                    f"anchor refused: seq {seq} hash {digest[:12]}... is behind the latest anchor "
                    f"seq {last[0]} hash {str(last[1])[:12]}...; the audit log was cut or rewritten. "
                    "Keep it for review."
                )
            db.execute(
                "INSERT INTO anchors (seq, hash, run_id, ts) VALUES (?, ?, ?, ?)",
                (seq, digest, run_id, time.time()),
            )

    def latest_anchor(self) -> AnchorRow | None:
        row = self._one("SELECT seq, hash, ts, run_id FROM anchors ORDER BY id DESC LIMIT 1")
        if row is None:
            return None
        return {"seq": int(row[0]), "hash": str(row[1]), "ts": float(row[2]), "run_id": row[3]}

    def anchor_history(self) -> list[AnchorRow]:
        """Every anchor ever stored, oldest first (``audit verify`` checks each against the log)."""
        rows = self._all("SELECT seq, hash, ts, run_id FROM anchors ORDER BY id")
        return [{"seq": int(q), "hash": str(h), "ts": float(t), "run_id": r} for q, h, t, r in rows]

    # -- audit events -------------------------------------------------------------------------
    # Event ids are never reused, even after every queued event was acknowledged (the table has no
    # AUTOINCREMENT, so the last issued id is kept in ``meta``): the host's puller reads "after its
    # cursor", and a reused id would be skipped. An ack may drop only events already delivered.
    def queue_event(self, event: str, payload: Mapping[str, object]) -> None:
        with self.transaction() as db:
            row = db.execute(
                "SELECT MAX(COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), 0), "
                "COALESCE((SELECT MAX(id) FROM events), 0))",
                (_EVENTS_LAST_ID,),
            ).fetchone()
            event_id = int(row[0]) + 1
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_EVENTS_LAST_ID, str(event_id))
            )
            db.execute(
                "INSERT INTO events (id, ts, event, payload) VALUES (?, ?, ?, ?)",
                (event_id, time.time(), event, json.dumps(payload, sort_keys=True)),
            )

    def events_after(self, after: int, limit: int = 1000) -> list[QueuedEvent]:
        """Queued events with id > ``after``; the highest id handed out is remembered for ``ack_events``."""
        with self.transaction() as db:
            rows = db.execute(
                "SELECT id, ts, event, payload FROM events WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
            ).fetchall()
            if rows:
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, MAX(?, COALESCE("
                    "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), 0)))",
                    (_EVENTS_DELIVERED, int(rows[-1][0]), _EVENTS_DELIVERED),
                )
        return [{"id": i, "ts": t, "event": e, "payload": json.loads(p)} for i, t, e, p in rows]

    def ack_events(self, up_to: int) -> int:
        """Drop the events with id <= ``up_to``; LedgerError (nothing dropped) past the last one delivered."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?", (_EVENTS_DELIVERED,)
            ).fetchone()
            delivered = 0 if row is None else int(row[0])
            if up_to > delivered:
                raise LedgerError(
                    f"ack up to event {up_to} refused: only events up to {delivered} were delivered; "
                    "an event is dropped only after the audit writer has read it"
                )
            return db.execute("DELETE FROM events WHERE id <= ?", (up_to,)).rowcount

    # -- answer times -------------------------------------------------------------------------
    def record_answer_time(self, answer: AnswerTime, pid: int) -> None:
        """Append the answer time a gate fixed at its start (every start adds a row; none is rewritten)."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO answer_times (ts, pid, record) VALUES (?, ?, ?)",
                (time.time(), pid, answer.model_dump_json(exclude_unset=True)),
            )

    def answer_times(self) -> list[AnswerTime]:
        """Every recorded gate start's answer time, oldest first."""
        return [
            AnswerTime.model_validate_json(r[0])
            for r in self._all("SELECT record FROM answer_times ORDER BY id")
        ]

    # -- quarantine ---------------------------------------------------------------------------
    def quarantine(self, run_id: str | None, ticket_id: str, reason: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO quarantine (run_id, ticket_id, ts, reason) VALUES (?, ?, ?, ?)",
                (run_id, ticket_id, time.time(), reason),
            )

    def quarantines(self) -> list[Quarantine]:
        rows = self._all("SELECT run_id, ticket_id, ts, reason FROM quarantine WHERE cleared = 0 ORDER BY id")
        return [Quarantine(run_id=r, ticket_id=t, ts=ts, reason=why) for r, t, ts, why in rows]
