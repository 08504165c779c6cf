"""Host-side inotify watch on decoy files (ctypes, no extra dependency).

Any open of a watched file, through any path or bind mount and by any reader (``cat``,
``python -S``, ctypes, a static binary), reaches the kernel's fsnotify on the shared inode and so
this watcher: it becomes a ``protected_read_attempt`` event. The kernel merges an open into an
identical unread one, so a burst of opens of one file may be one event: detection, not a count.
A queue overflow becomes a ``monitoring_gap`` event (trust rule 11). Past ``MAX_EVENTS`` further
events are counted, not kept, and reported in one final ``monitoring_gap``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import threading
import time
from collections.abc import Callable

from sandbox._records import SandboxEvent

IN_OPEN = 0x00000020
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
POLL_S = 1.0  # the longest select; stop() wakes it through a pipe
MAX_EVENTS = 1000  # events kept per run; past it: counted in a final monitoring_gap event

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class DecoyWatcher:
    """Watches files (host path -> sandbox path) until ``stop()``; events go to ``emit``."""

    def __init__(self, files: dict[str, str], emit: Callable[[SandboxEvent], None]) -> None:
        self._emit = emit
        self._fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._paths: dict[int, str] = {}
        for host, inside in files.items():
            wd = _libc.inotify_add_watch(self._fd, os.fsencode(host), IN_OPEN)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch failed for {host}")
            self._paths[wd] = inside
        self._count = 0
        self._wake_r, self._wake_w = os.pipe()  # written by stop(): ends the select at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="decoy-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], POLL_S)
            if self._fd in ready:
                self._drain()

    def _drain(self) -> None:
        """Read and handle everything queued now."""
        while True:
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            offset = 0
            while offset + _HEADER.size <= len(buf):
                wd, mask, _cookie, length = _HEADER.unpack_from(buf, offset)
                offset += _HEADER.size + length
                self._handle(wd, mask)

    def _handle(self, wd: int, mask: int) -> None:
        if mask & IN_Q_OVERFLOW:
            self._emit(
                SandboxEvent(
                    kind="monitoring_gap", ts=time.time(), detail={"reason": "inotify queue overflow"}
                )
            )
        elif mask & IN_OPEN and wd in self._paths:
            self._count += 1
            if self._count <= MAX_EVENTS:
                self._emit(SandboxEvent(kind="protected_read_attempt", ts=time.time(), path=self._paths[wd]))

    def stop(self) -> None:
        """Stop watching after reading what is queued; closes the inotify descriptor."""
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join()
        self._drain()
        if self._count > MAX_EVENTS:
            self._emit(
                SandboxEvent(
                    kind="monitoring_gap",
                    ts=time.time(),
                    detail={"reason": "decoy event cap", "kept": MAX_EVENTS, "seen": self._count},
                )
            )
        for fd in (self._fd, self._wake_r, self._wake_w):
            os.close(fd)
