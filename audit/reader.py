"""Reading ``audit/log.jsonl``: complete lines as records, a torn last line set apart.

Only a line ending in a newline is complete (the writer puts each record and its newline in one
write, then fsyncs). Bytes after the last newline are a torn tail: a writer was killed mid-write.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from segfactory.records import AuditRecord

LOG_NAME = "log.jsonl"


@dataclass(frozen=True)
class Line:
    """One complete line: its 1-based number, and the record or why it is not one."""

    number: int
    record: AuditRecord | None
    error: str | None = None


@dataclass(frozen=True)
class TornTail:
    """Bytes after the last newline."""

    offset: int
    size: int
    sha256: str


def parse_line(raw: bytes) -> AuditRecord:
    """One record from one line (without its newline); raises ValueError when it is not one."""
    try:
        return AuditRecord.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "line"
        raise ValueError(f"{where}: {first.get('msg', 'invalid')}") from exc


def read_lines(path: Path) -> tuple[list[Line], TornTail | None]:
    """All complete lines of the log and its torn tail, if any. A missing log has neither."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], None
    cut = data.rfind(b"\n") + 1
    torn = None
    if cut < len(data):
        rest = data[cut:]
        torn = TornTail(offset=cut, size=len(rest), sha256=hashlib.sha256(rest).hexdigest())
    lines = []
    for number, raw in enumerate(data[:cut].splitlines(), start=1):
        try:
            lines.append(Line(number, parse_line(raw)))
        except ValueError as exc:
            lines.append(Line(number, None, str(exc)))
    return lines, torn


def iter_records(path: Path) -> Iterator[AuditRecord]:
    """The parseable records of the log, in file order (for show and check; verify reads lines)."""
    lines, _ = read_lines(path)
    for line in lines:
        if line.record is not None:
            yield line.record
