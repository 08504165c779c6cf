"""The host's end of the in-sandbox audit hook: a datagram socket, read while the sandbox runs.

The socket lies in a per-run directory mounted read-only at ``/run/segfactory``: code inside
can send to it but cannot write, replace or remove anything there, and a datagram once sent is
in the host's queue, so no record can be taken back. Everything received is untrusted sandbox
output, read under caps (trust rule 11):

- a datagram longer than ``RECORD_MAX_BYTES`` is cut by the kernel: a ``hook_malformed`` event
  with ``truncated: true``; so is anything that is not a JSON object of a known kind;
- a string field longer than ``FIELD_MAX_CHARS`` is cut: ``truncated: true`` and ``<field>_chars``;
- past ``MAX_EVENTS`` records the rest are counted, not kept: one ``monitoring_gap`` at the end;
- past ``MAX_DATAGRAMS`` datagrams or ``MAX_BYTES`` in all the socket is closed (later sends
  fail inside) and the flood is a ``monitoring_gap``: a flood is itself a finding;
- a datagram from a uid other than the sandbox's or ours (another user of this host) is
  dropped and counted in a ``monitoring_gap``;
- a ``hook_cap`` record (one process stopped reporting) is a ``monitoring_gap``.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sandbox._records import DetailValue, SandboxEvent

RECORD_MAX_BYTES = 16 * 1024  # one datagram; past it: cut by the kernel, a hook_malformed event
FIELD_MAX_CHARS = 4096  # one string field of a record; past it: cut, truncated=true, <field>_chars
MAX_EVENTS = 1000  # records kept per run; past it: counted, one monitoring_gap at the end
MAX_DATAGRAMS = 10_000  # read per run (ten times what is kept); past it, a flood: the socket is closed
MAX_BYTES = 16 * 1024**2  # read per run; past it, a flood: the socket is closed
RECV_BUFFER_BYTES = 4 * 1024**2  # the socket's receive queue, so a burst waits rather than blocks
POLL_S = 1.0  # the longest select; stop() wakes it through a pipe
RAW_SHOWN_CHARS = 512  # of a malformed datagram, kept in its event
KINDS = {"file_open", "file_write", "socket_call", "ctypes_call", "process_spawn"}
STR_FIELDS = ("op", "path", "resolved", "mode", "address", "library", "symbol", "function", "args", "argv")
INT_FIELDS = ("pid", "family", "type", "count", "args_chars", "path_chars", "resolved_chars", "argv_chars")
_CREDS = struct.Struct("iII")  # struct ucred: pid, uid, gid


class HookListener:
    """Binds ``path`` (a datagram socket others may send to) and turns what arrives into events.

    ``uids``: the senders accepted (the sandbox's uid as this host sees it, and our own).
    Events go to ``emit`` from the listener's thread; ``stop()`` reads what is still queued,
    emits the gaps, closes and removes the socket.
    """

    def __init__(self, path: Path, uids: set[int], emit: Callable[[SandboxEvent], None]) -> None:
        self.path, self._uids, self._emit = path, uids, emit
        self._sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER_BYTES)
        self._sock.bind(str(path))
        os.chmod(path, 0o666)  # the sandbox's uid must be able to send
        self._sock.setblocking(False)
        self.seen = self.kept = self.bytes = self.foreign = 0
        self.flooded = False
        self._wake_r, self._wake_w = os.pipe()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="audit-hook", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set() and self._sock is not None:
            fd = self._sock.fileno()
            ready, _, _ = select.select([fd, self._wake_r], [], [], POLL_S)
            if fd in ready:
                self._drain()

    def _drain(self) -> None:
        while self._sock is not None:
            try:
                data, ancillary, flags, _ = self._sock.recvmsg(
                    RECORD_MAX_BYTES, socket.CMSG_SPACE(_CREDS.size)
                )
            except (BlockingIOError, InterruptedError):
                return
            self._receive(data, _sender_uid(ancillary), bool(flags & socket.MSG_TRUNC))

    def _receive(self, data: bytes, uid: int | None, cut: bool) -> None:
        if uid is None or uid not in self._uids:
            self.foreign += 1
            return
        self.seen += 1
        self.bytes += len(data)
        if self.seen > MAX_DATAGRAMS or self.bytes > MAX_BYTES:
            self._close_for_flood()
            return
        if self.kept >= MAX_EVENTS:
            return
        event = parse_record(data, cut)
        self.kept += 1
        self._emit(event)

    def _close_for_flood(self) -> None:
        self.flooded = True
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def stop(self) -> None:
        """Read what is queued, then close: call once the sandbox has ended."""
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join()
        self._drain()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self.path.unlink(missing_ok=True)
        for detail in self._gaps():
            self._emit(SandboxEvent(kind="monitoring_gap", ts=time.time(), detail=detail))

    def _gaps(self) -> list[dict[str, DetailValue]]:
        gaps: list[dict[str, DetailValue]] = []
        if self.flooded:
            gaps.append(
                {"reason": "audit hook flood", "datagrams": self.seen, "bytes": self.bytes, "kept": self.kept}
            )
        elif self.seen > self.kept:
            gaps.append({"reason": "audit hook event cap", "kept": self.kept, "seen": self.seen})
        if self.foreign:
            gaps.append({"reason": "audit hook datagrams from another user, dropped", "count": self.foreign})
        return gaps


def _sender_uid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CREDS.size:
            return int(_CREDS.unpack_from(data)[1])
    return None


def parse_record(data: bytes, cut: bool) -> SandboxEvent:
    """One datagram as an event; never raises. Malformed or cut: ``hook_malformed``."""
    try:
        item = None if cut else json.loads(data)
    except ValueError:
        item = None
    kind = item.get("k") if isinstance(item, dict) else None
    if not isinstance(item, dict) or kind not in KINDS | {"hook_cap"}:
        detail: dict[str, DetailValue] = {
            "raw": data[:RAW_SHOWN_CHARS].decode("utf-8", "replace"),
            "bytes": len(data),
        }
        return SandboxEvent(
            kind="hook_malformed",
            ts=time.time(),
            sandbox_reported=True,
            detail={**detail, "truncated": cut or len(data) > RAW_SHOWN_CHARS},
        )
    detail = _fields(item)
    if kind == "hook_cap":
        reason = {"reason": "audit hook stopped reporting in one process (its record cap)"}
        return SandboxEvent(
            kind="monitoring_gap", ts=time.time(), sandbox_reported=True, detail={**reason, **detail}
        )
    ts = item.get("ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        detail["sandbox_ts"] = float(ts)
    path = detail.pop("path", None)
    return SandboxEvent(kind=kind, ts=time.time(), path=path, sandbox_reported=True, detail=detail)


def _fields(item: dict[str, object]) -> dict[str, DetailValue]:
    """The known fields, typed and capped; a cut string says so."""
    out: dict[str, DetailValue] = {}
    for key in STR_FIELDS:
        value = item.get(key)
        if isinstance(value, str):
            if len(value) > FIELD_MAX_CHARS:
                out.update({"truncated": True, f"{key}_chars": len(value)})
                value = value[:FIELD_MAX_CHARS]
            out[key] = value
    for key in INT_FIELDS:
        value = item.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63:
            out.setdefault(key, value)
    if item.get("truncated") is True:
        out["truncated"] = True
    return out
