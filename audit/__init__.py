"""The tamper-evident audit log: one host-side writer, a SHA-256 chain, an anchor outside it.

Public API:
- ``AuditLog(home, anchor)``: ``append(actor, event, payload, run_id=None) -> AuditRecord``,
  ``put_blob(bytes) -> "blob:<sha256>"``, ``flush_anchor()``, ``close_run(run_id)``, ``close()``.
- ``AnchorStore`` (Protocol) with ``GateAnchorStore`` (the real one) and ``MemoryAnchorStore`` /
  ``FileAnchorStore`` (tests only: an anchor in the log's own trust domain is not an anchor).
- ``verify_log`` (``audit verify``), ``check_records`` + ``load_policy`` (``audit check``),
  ``select`` (``audit show``), ``gate_events.pull`` (the gate's queued events into the log).

See docs/audit.md.
"""

from audit.anchor import AnchorStore, FileAnchorStore, GateAnchorStore, MemoryAnchorStore
from audit.blobs import INLINE_MAX_BYTES, BlobStore
from audit.check import Finding, ProtectedPaths, check_records, load_policy, ticket_of
from audit.log import ANCHOR_EVERY_RECORDS, ANCHOR_EVERY_S, GENESIS_HASH, AuditLog
from audit.reader import iter_records, read_lines
from audit.show import select
from audit.verify import VerifyJson, VerifyReport, verify_log
from segfactory.records import Anchor

__all__ = [
    "ANCHOR_EVERY_RECORDS",
    "ANCHOR_EVERY_S",
    "GENESIS_HASH",
    "INLINE_MAX_BYTES",
    "Anchor",
    "AnchorStore",
    "AuditLog",
    "BlobStore",
    "FileAnchorStore",
    "Finding",
    "GateAnchorStore",
    "MemoryAnchorStore",
    "ProtectedPaths",
    "VerifyJson",
    "VerifyReport",
    "check_records",
    "iter_records",
    "load_policy",
    "read_lines",
    "select",
    "ticket_of",
    "verify_log",
]
