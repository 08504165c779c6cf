"""``audit show``: select records by run, actor, event and time."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from segfactory.errors import UsageError
from segfactory.records import Actor, AuditRecord
from segfactory.units import parse_duration


def parse_time(text: str, now: float | None = None) -> float:
    """Epoch seconds from an ISO 8601 time (UTC unless it says otherwise) or a duration ago (``10m``)."""
    if any(c in text for c in "-:T"):
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise UsageError(
                f"cannot read time {text!r}; use ISO 8601 (2026-11-30T12:00) or a duration ago (10m)"
            ) from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    return (time.time() if now is None else now) - parse_duration(text)


def select(
    records: Iterable[AuditRecord],
    *,
    run: str | None = None,
    actor: str | None = None,
    event: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> Iterator[AuditRecord]:
    """The records that pass every given filter (``until`` is exclusive)."""
    if actor is not None:
        known = [a.value for a in Actor]
        if actor not in known:
            raise UsageError(f"unknown actor {actor!r}; known: {', '.join(known)}")
    for record in records:
        if run is not None and record.run_id != run:
            continue
        if actor is not None and record.actor.value != actor:
            continue
        if event is not None and record.event != event:
            continue
        if since is not None and record.ts < since:
            continue
        if until is not None and record.ts >= until:
            continue
        yield record
