"""Bring the gate's queued events into the host's audit log (the log has one writer).

The gate queues its events in its ledger with ids it never reuses; ``pull`` reads those after its
cursor (``GET /audit/events?after=``), appends each as an ``actor="gate"`` record carrying
``gate_event_id`` and ``gate_ts``, and acknowledges them (``POST /audit/ack``) so the gate may
drop them. The gate refuses an ack past the last event it delivered, so no ack drops an event
before a puller has read it.

Exactly once, across processes and crashes: a pull holds an exclusive lock on
``audit/gate_events.lock`` from its first read to its last append, so two pullers never append the
same event. The cursor (the last event id in the log) lives in ``audit/gate_events.json`` and is
marked ``clean: false`` before the first append; a puller that finds it unclean (the last one
died mid-pull) recomputes the cursor from the log's own ``gate_event_id`` values before reading.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from audit.log import AuditLog
from audit.reader import LOG_NAME, iter_records
from segfactory.files import write_atomic
from segfactory.records import Actor

MAX_PULL_ROUNDS = 100  # past this many non-empty batches in one call, pull returns; call it again
STATE_NAME = "gate_events.json"
LOCK_NAME = "gate_events.lock"


class GateEvent(BaseModel):
    """One queued gate event, as ``GET /audit/events`` returns it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    ts: float
    event: str
    payload: dict[str, object]


class GateEventsClient(Protocol):
    """The part of ``gate.client.GateClient`` the puller uses."""

    def pull_events(self, after: int) -> Any: ...

    def ack_events(self, up_to: int) -> Any: ...


def pull(client: GateEventsClient, log: AuditLog) -> int:
    """Append every gate event after the cursor to ``log``; return how many were appended."""
    state = log.dir / STATE_NAME
    with _pull_lock(log.dir / LOCK_NAME):
        cursor, acked = _cursor(state, log)
        appended = 0
        for _ in range(MAX_PULL_ROUNDS):
            events = sorted(
                (e for e in _events(client.pull_events(cursor)) if e.id > cursor), key=lambda e: e.id
            )
            if not events:
                break
            if appended == 0:
                _save(state, cursor, clean=False, acked=False)
            for event in events:
                run_id = event.payload.get("run_id")
                payload = {**event.payload, "gate_event_id": event.id, "gate_ts": event.ts}
                log.append(
                    Actor.GATE, event.event, payload, run_id=run_id if isinstance(run_id, str) else None
                )
                appended += 1
            cursor = events[-1].id
        if appended:
            _save(state, cursor, clean=True, acked=False)
        if cursor > 0 and not (acked and appended == 0):
            client.ack_events(cursor)  # a failed ack loses nothing: the next pull sends it again
            _save(state, cursor, clean=True, acked=True)
    return appended


@contextmanager
def _pull_lock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _cursor(state: Path, log: AuditLog) -> tuple[int, bool]:
    """(the id of the last gate event already in the log, whether the gate has acknowledged it)."""
    try:
        saved = json.loads(state.read_text())
    except FileNotFoundError:
        saved = {}
    if saved.get("clean") is True and isinstance(saved.get("cursor"), int):
        return int(saved["cursor"]), bool(saved.get("acked"))
    # no state, an unclean one, or the older {"last_id", "acked"} form: the log says where we are
    ids = [r.payload.get("gate_event_id") for r in iter_records(log.dir / LOG_NAME) if r.actor == Actor.GATE]
    return max((i for i in ids if isinstance(i, int)), default=0), False


def _events(reply: Any) -> list[GateEvent]:
    if isinstance(reply, dict):
        reply = reply.get("events", [])
    return [e if isinstance(e, GateEvent) else GateEvent.model_validate(_as_dict(e)) for e in reply]


def _as_dict(item: Any) -> Any:
    return item.model_dump(mode="json") if isinstance(item, BaseModel) else item


def _save(path: Path, cursor: int, *, clean: bool, acked: bool) -> None:
    write_atomic(path, json.dumps({"cursor": cursor, "clean": clean, "acked": acked}))
