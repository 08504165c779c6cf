"""Capped capture of a sandbox's output streams (trust rule 11: limits fail loudly).

Everything is read (so the writer never blocks), the first ``cap`` bytes are kept, and the total
is counted: past the cap the Output says ``truncated=true`` with the original size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import IO

from sandbox._records import Output

CHUNK_BYTES = 64 * 1024  # one read from a pipe


class CappedBuffer:
    """Keeps the first ``cap`` bytes written to it and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self._parts: list[bytes] = []
        self._kept = 0
        self._lock = threading.Lock()

    def write(self, chunk: bytes) -> None:
        with self._lock:
            self.size += len(chunk)
            room = self.cap - self._kept
            if room > 0:
                part = chunk[:room]
                self._parts.append(part)
                self._kept += len(part)

    def output(self) -> Output:
        with self._lock:
            data = b"".join(self._parts)
            return Output(data=data, size=self.size, truncated=self.size > len(data))


def pump(source: Iterable[bytes] | IO[bytes], sink: Callable[[bytes], None]) -> threading.Thread:
    """Start a daemon thread copying ``source`` (a pipe or an iterator of chunks) into ``sink``."""

    def run() -> None:
        if hasattr(source, "read"):
            read = source.read1 if hasattr(source, "read1") else source.read
            while chunk := read(CHUNK_BYTES):
                sink(chunk)
        else:
            for chunk in source:
                sink(chunk)

    thread = threading.Thread(target=run, name="sandbox-pump", daemon=True)
    thread.start()
    return thread
