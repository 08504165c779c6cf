"""Bring the gate's queued events into the host's audit log (the log has one writer).

The gate queues its events in its ledger; ``pull`` reads them (``GET /audit/events?after=``),
appends each as an ``actor="gate"`` record carrying ``gate_event_id`` and ``gate_ts``, and
acknowledges them (``POST /audit/ack``) so the gate drops them. Every pull starts after 0: once
acknowledged, events are gone from the queue, and the gate may then reuse their ids.

Exactly once, across crashes: before acknowledging, the puller writes ``{"last_id": L, "acked":
false}`` to ``audit/gate_events.json``; a later pull that finds an unfinished ack sends it first
(those events are already in the log) and only then reads the queue again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from audit.log import AuditLog
from segfactory.records import Actor

MAX_PULL_ROUNDS = 100  # past this many non-empty batches in one call, pull returns; call it again
STATE_NAME = "gate_events.json"


class GateEvent(BaseModel):
    """One queued gate event, as ``GET /audit/events`` returns it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    ts: float
    event: str
    payload: dict[str, Any]


class GateEventsClient(Protocol):
    """The part of ``gate.client.GateClient`` the puller uses."""

    def pull_events(self, after: int) -> Any: ...

    def ack_events(self, up_to: int) -> Any: ...


def pull(client: GateEventsClient, log: AuditLog) -> int:
    """Append every queued gate event to ``log``; return how many were appended."""
    state = log.dir / STATE_NAME
    unfinished = _unfinished_ack(state)
    if unfinished is not None:
        client.ack_events(unfinished)
        _save(state, unfinished, acked=True)
    appended = 0
    last = 0
    for _ in range(MAX_PULL_ROUNDS):
        events = sorted((e for e in _events(client.pull_events(last)) if e.id > last), key=lambda e: e.id)
        if not events:
            break
        for event in events:
            run_id = event.payload.get("run_id")
            payload = {**event.payload, "gate_event_id": event.id, "gate_ts": event.ts}
            log.append(Actor.GATE, event.event, payload, run_id=run_id if isinstance(run_id, str) else None)
            appended += 1
        last = events[-1].id
    if appended:
        _save(state, last, acked=False)
        client.ack_events(last)
        _save(state, last, acked=True)
    return appended


def _events(reply: Any) -> list[GateEvent]:
    if isinstance(reply, dict):
        reply = reply.get("events", [])
    return [e if isinstance(e, GateEvent) else GateEvent.model_validate(_as_dict(e)) for e in reply]


def _as_dict(item: Any) -> Any:
    return item.model_dump(mode="json") if isinstance(item, BaseModel) else item


def _unfinished_ack(path: Path) -> int | None:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return None if state.get("acked", True) else int(state["last_id"])


def _save(path: Path, last: int, *, acked: bool) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps({"last_id": last, "acked": acked}))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
