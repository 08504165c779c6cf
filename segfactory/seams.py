"""Protocols for the collaborators the libraries are handed, so that no layer imports the one
that implements them.

``AuditSink`` is the host-side audit writer as everyone who records an event uses it:
``audit.AuditLog`` satisfies it, and tests pass any object with the same two methods. The
runner, the agents and the controls are given one; none of them writes the log file itself,
and agents never read it back (trust rules 9 and 10, docs/trust.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class AuditSink(Protocol):
    """Append-only audit writer.

    ``append`` records one event for ``actor`` (a ``segfactory.records.Actor`` or its value) and
    returns whatever the writer returns (the record, or nothing). ``put_blob`` stores bytes
    exactly as given and returns their reference ``"blob:<sha256 hex>"``. Both may raise the
    writer's own errors; callers let them propagate, since an unaudited call must not proceed.
    """

    def append(
        self, actor: Any, event: str, payload: Mapping[str, object], run_id: str | None = None
    ) -> Any: ...

    def put_blob(self, data: bytes) -> str: ...


__all__ = ["AuditSink"]
