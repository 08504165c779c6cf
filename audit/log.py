"""The single host-side writer of ``<home>/audit/log.jsonl`` (trust rule 10).

Each record is one line of canonical JSON (``segfactory.records.canonical_json``) whose ``prev``
is the hash of the record before it; the first record's ``prev`` is GENESIS_HASH. A record and
its newline go out in one write, then the file is fsynced: once ``append`` returns, the record is
on disk. An exclusive ``fcntl`` lock on ``audit/log.lock`` around every append keeps one chain
when several processes write to the same home.

Anchoring: the chain head is put into the anchor store once at most ANCHOR_EVERY_RECORDS records
or ANCHOR_EVERY_S seconds have gone unanchored, and at every ``close_run``. Past those bounds an
automatic anchoring that fails is logged as a warning and retried with the next batch (``audit
verify`` reports the window that stayed unanchored); ``flush_anchor`` and ``close_run`` raise.
Either way the failure is also written into the chain as an ``anchor_failed`` record (the seq and
hash that were not anchored, and why), so a refused or lost anchoring stays on the record.

Recovery: bytes after the last newline are a record torn by a kill mid-write. Before its next
append, a writer moves them to ``audit/recovered/`` and records a ``log_recovered`` event with
their hash, so the chain continues from the last complete record.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic_core import to_jsonable_python

from audit.anchor import AnchorStore
from audit.blobs import BlobStore
from audit.reader import LOG_NAME, parse_line
from segfactory.errors import DataError
from segfactory.home import Home
from segfactory.records import Actor, Anchor, AuditRecord, canonical_json

GENESIS_HASH = "0" * 64  # ``prev`` of the first record
ANCHOR_EVERY_RECORDS = 64  # at most this many records wait for an anchor
ANCHOR_EVERY_S = 5.0  # ... or at most this long (a timer anchors an idle writer)
TAIL_CHUNK_BYTES = 64 * 1024  # read size when scanning backwards for the last record

log = logging.getLogger(__name__)


class AuditLog:
    """Appends hash-chained records; puts content-addressed blobs; anchors the chain head.

    Thread-safe and multi-process-safe within one home. Use as a context manager, or call
    ``close`` (which anchors the head when an anchor store is set).
    """

    def __init__(
        self,
        home: Home,
        anchor: AnchorStore | None,
        *,
        anchor_every_records: int = ANCHOR_EVERY_RECORDS,
        anchor_every_s: float = ANCHOR_EVERY_S,
    ) -> None:
        self.dir = home.audit
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / LOG_NAME
        self.blobs = BlobStore(self.dir / "blobs")
        self.anchor = anchor
        self.anchor_every_records = anchor_every_records
        self.anchor_every_s = anchor_every_s
        self.anchor_failures = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o640)
        self._lock_fd = os.open(self.dir / "log.lock", os.O_RDWR | os.O_CREAT, 0o640)
        self._mutex = threading.Lock()
        self._cache: tuple[int, int, str] | None = None  # (file size, head seq, head hash)
        self._anchored: tuple[int, str] | None = None
        self._pending = 0
        self._timer: threading.Timer | None = None
        self._closed = False
        try:
            with self._locked():
                self._head()  # recovers a torn tail left by a killed writer
        except BaseException:
            os.close(self._fd)
            os.close(self._lock_fd)
            raise

    # -- public API ---------------------------------------------------------------------------

    def append(
        self, actor: Actor | str, event: str, payload: Mapping[str, object], run_id: str | None = None
    ) -> AuditRecord:
        """Write one record (fsynced) and return it. Large payload values become blob references."""
        actor = Actor(actor)
        body = self.blobs.externalise(to_jsonable_python(payload))
        with self._locked():
            seq, prev = self._head()
            record = self._write(seq + 1, prev, actor, event, body, run_id)
            self._pending += 1
            if self.anchor is not None and self._pending >= self.anchor_every_records:
                self._flush_best_effort(run_id)
        self._arm_timer()
        return record

    def put_blob(self, data: bytes) -> str:
        """Store bytes (byte for byte, e.g. an LLM request) and return ``blob:<sha256>``."""
        return self.blobs.put(data)

    def flush_anchor(self, run_id: str | None = None) -> Anchor | None:
        """Anchor the current head now; raises whatever the anchor store raises."""
        with self._locked():
            return self._flush(run_id)

    def close_run(self, run_id: str) -> Anchor | None:
        """A run ended: its last records must be anchored (raises when the anchor fails)."""
        return self.flush_anchor(run_id)

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last record; (-1, GENESIS_HASH) for an empty log."""
        with self._locked():
            return self._head()

    def close(self) -> None:
        """Anchor the head (when a store is set) and release the files."""
        if self._closed:
            return
        self._cancel_timer()
        try:
            if self.anchor is not None:
                self.flush_anchor()
        finally:
            with self._mutex:  # a timer flush holding the mutex finishes before the files close
                if not self._closed:
                    self._closed = True
                    os.close(self._fd)
                    os.close(self._lock_fd)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- chain --------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            if self._closed:
                raise RuntimeError(f"audit log {self.path} is closed")
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _head(self) -> tuple[int, str]:
        """(seq, hash) of the last complete record, recovering a torn tail first. Lock held."""
        size = os.fstat(self._fd).st_size
        if self._cache is not None and self._cache[0] == size:
            return self._cache[1], self._cache[2]
        with open(self.path, "rb") as fh:
            cut, last = _last_line(fh, size)
        seq, head = (-1, GENESIS_HASH) if last is None else _seq_hash(last, self.path)
        self._cache = (cut, seq, head)
        if cut < size:
            self._recover(cut, size, seq, head)
        return self._cache[1], self._cache[2]

    def _write(
        self, seq: int, prev: str, actor: Actor, event: str, payload: dict[str, object], run_id: str | None
    ) -> AuditRecord:
        probe = AuditRecord(
            seq=seq,
            ts=time.time(),
            run_id=run_id,
            actor=actor,
            event=event,
            payload=payload,
            prev=prev,
            hash="",
        )
        record = probe.model_copy(update={"hash": probe.computed_hash()})
        digest = record.hash
        line = canonical_json(record.model_dump(mode="json")) + b"\n"
        offset = os.fstat(self._fd).st_size
        written = os.write(self._fd, line)
        if written != len(line):
            os.ftruncate(self._fd, offset)
            raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes; record not kept")
        os.fsync(self._fd)
        self._cache = (offset + len(line), seq, digest)
        return record

    def _recover(self, cut: int, size: int, seq: int, head: str) -> None:
        """Move the torn bytes [cut, size) aside, truncate, and record that we did."""
        with open(self.path, "rb") as fh:
            fh.seek(cut)
            torn = fh.read(size - cut)
        digest = hashlib.sha256(torn).hexdigest()
        recovered = self.dir / "recovered"
        recovered.mkdir(exist_ok=True)
        target = recovered / f"{int(time.time())}-{digest[:16]}.torn"
        with open(target, "wb") as out:
            out.write(torn)
            out.flush()
            os.fsync(out.fileno())
        os.ftruncate(self._fd, cut)
        os.fsync(self._fd)
        log.warning(
            "audit log %s had a torn last record (%d bytes); moved to %s", self.path, len(torn), target
        )
        payload = {
            "torn_sha256": digest,
            "torn_bytes": len(torn),
            "offset": cut,
            "moved_to": str(target.relative_to(self.dir)),
        }
        self._write(seq + 1, head, Actor.SYSTEM, "log_recovered", payload, None)
        self._pending += 1

    # -- anchoring ----------------------------------------------------------------------------

    def _flush(self, run_id: str | None) -> Anchor | None:
        """Anchor the head if it moved since the last anchoring. Lock held; raises on failure."""
        if self.anchor is None:
            return None
        seq, head = self._head()
        if seq < 0:
            return None
        if self._anchored != (seq, head):
            try:
                self.anchor.put(seq, head, run_id)
            except Exception as exc:
                self._record_anchor_failure(seq, head, exc, run_id)
                raise
            self._anchored = (seq, head)
        self._pending = 0
        return Anchor(seq=seq, hash=head, ts=time.time(), run_id=run_id)

    def _record_anchor_failure(self, seq: int, head: str, exc: Exception, run_id: str | None) -> None:
        """An anchoring that failed is a record of the chain itself, not only a warning. Lock held."""
        payload = {"seq": seq, "hash": head, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        self._write(seq + 1, head, Actor.SYSTEM, "anchor_failed", payload, run_id)
        self._pending += 1

    def _flush_best_effort(self, run_id: str | None) -> None:
        try:
            self._flush(run_id)
        except Exception as exc:  # the record is written; the open window shows in `audit verify`
            self.anchor_failures += 1
            self._pending = 0
            log.warning("anchoring audit head failed (%s); retrying with the next batch", exc)

    def _arm_timer(self) -> None:
        if self.anchor is None or self._pending == 0 or self._timer is not None:
            return
        timer = threading.Timer(self.anchor_every_s, self._on_timer)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _on_timer(self) -> None:
        self._timer = None
        try:
            with self._locked():
                if self._pending:
                    self._flush_best_effort(None)
        except RuntimeError:  # closed meanwhile
            return

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


def _last_line(fh: Any, size: int) -> tuple[int, bytes | None]:
    """(offset just past the last newline, the last complete line or None) of a file of ``size``."""
    newline_at = _rfind_newline(fh, size)
    if newline_at < 0:
        return 0, None
    previous = _rfind_newline(fh, newline_at)
    fh.seek(previous + 1)
    return newline_at + 1, fh.read(newline_at - previous - 1)


def _rfind_newline(fh: Any, end: int) -> int:
    """Offset of the last newline before ``end``, or -1; reads backwards in chunks."""
    while end > 0:
        start = max(0, end - TAIL_CHUNK_BYTES)
        fh.seek(start)
        found = fh.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def _seq_hash(line: bytes, path: Path) -> tuple[int, str]:
    try:
        record = parse_line(line)
    except ValueError as exc:
        raise DataError(
            f"the last complete line of {path} is not an audit record ({exc}); the log was altered. "
            "Run `segfactory audit verify` and keep the log for review; nothing was appended."
        ) from exc
    return record.seq, record.hash
