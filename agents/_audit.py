"""The audit seam: what agents need from the host-side audit writer (trust rule 10).

``audit.AuditLog`` satisfies :class:`AuditSink`; tests may pass any object with the same two
methods. Agents never write the log themselves and never read it back (trust rule 9).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class AuditSink(Protocol):
    """Append-only audit writer.

    ``append`` records one event for ``actor`` (an ``segfactory.records.Actor`` value) and
    returns whatever the writer returns (the record, or nothing). ``put_blob`` stores bytes
    exactly as given and returns their reference ``"blob:<sha256 hex>"``. Both may raise the
    writer's own errors; agents let them propagate, since an unaudited call must not proceed.
    """

    def append(self, actor: Any, event: str, payload: dict[str, Any], run_id: str | None = None) -> Any: ...

    def put_blob(self, data: bytes) -> str: ...
