"""Fixtures for the audit tests: a home with a log of ten anchored records."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit import AuditLog, MemoryAnchorStore
from segfactory.home import Home

RECORDS = 10


@pytest.fixture
def home(tmp_home: Path) -> Home:
    return Home(tmp_home)


@pytest.fixture
def anchored(home: Home) -> tuple[Home, MemoryAnchorStore]:
    """A log of RECORDS records whose head is anchored in a memory store."""
    store = MemoryAnchorStore()
    with AuditLog(home, store) as log:
        for i in range(RECORDS):
            log.append("runner", "step", {"i": i}, run_id="r1")
        log.close_run("r1")
    return home, store


def log_lines(home: Home) -> list[bytes]:
    return (home.audit / "log.jsonl").read_bytes().splitlines(keepends=True)


def write_lines(home: Home, lines: list[bytes]) -> None:
    (home.audit / "log.jsonl").write_bytes(b"".join(lines))
