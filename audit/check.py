"""``audit check``: protected-path reads, found by applying ``policies/protected_paths.yaml``.

Two sources of findings:
- every record whose event is in ``finding_events`` (decoy hits, refused path escapes, what the
  in-sandbox audit hook saw, monitoring gaps), whoever wrote it: an attempt is evidence even
  when it failed;
- every path-like token (one containing ``/``) in the payload of a record written by an actor in
  ``scan_actors`` (tool-call arguments, sandbox commands, sandbox-reported file opens) that
  matches a protected pattern, as written or normalised.

A payload value moved into a blob (``audit.blobs``: over INLINE_MAX_BYTES) is opened and scanned
like an inline one, so padding an argument past the inline size hides nothing. Only the blobs of
``opaque_blob_events`` stay closed: they are LLM traffic byte for byte, whose prompts name
protected paths legitimately, and the tool calls an LLM asks for are audited as their own
records. A blob that cannot be scanned (missing, altered, past MAX_SCAN_BLOB_BYTES) is itself a
finding of kind ``unscanned``: a check that could not look does not pass.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from audit.blobs import BLOB_REF, BlobStore
from segfactory.errors import DataError, PolicyError
from segfactory.home import SOURCE_ROOT
from segfactory.records import Actor, AuditRecord

DEFAULT_POLICY = SOURCE_ROOT / "policies" / "protected_paths.yaml"
_SPLIT = re.compile(r"[\s\"'`=,;()\[\]{}<>|&]+")
MAX_SCAN_BLOB_BYTES = 64 * 1024**2  # a larger blob is not read: an ``unscanned`` finding instead
MAX_BLOB_DEPTH = 4  # blobs referenced from inside blobs are followed this deep; deeper: ``unscanned``


class ProtectedPaths(BaseModel):
    """The validated policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = 1
    scan_actors: list[Actor]
    finding_events: list[str] = Field(min_length=1)
    patterns: list[str] = Field(min_length=1)
    # events whose blobs are LLM traffic (bytes as sent and received): not opened by the scan
    opaque_blob_events: list[str] = Field(
        default_factory=lambda: ["llm_http_request", "llm_http_response", "llm_attempt"]
    )

    def for_home(self, home: Path) -> list[str]:
        """The patterns with ``{home}`` replaced by the home's absolute path."""
        root = str(Path(home).resolve())
        return [p.replace("{home}", root) for p in self.patterns]


class Finding(BaseModel):
    """One protected-path read (or attempt) found in the log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int
    ts: float
    run_id: str | None
    actor: str
    event: str
    kind: (
        str  # "event": a decoy hit or the like; "argument": a path in a payload; "unscanned": a blob not read
    )
    path: str  # the path, or for an event without one what it named (an address, a symbol, a command)
    pattern: str | None
    ticket_id: str | None = None  # the ticket (or code-agent draft) the record belongs to, when it says


def load_policy(path: Path | None = None) -> ProtectedPaths:
    """Read and validate the policy; raises PolicyError naming the file and the problem."""
    source = Path(path) if path is not None else DEFAULT_POLICY
    try:
        data = yaml.safe_load(source.read_text())
        return ProtectedPaths.model_validate(data)
    except FileNotFoundError as exc:
        raise PolicyError(f"protected-path policy {source} is missing") from exc
    except (yaml.YAMLError, ValidationError) as exc:
        raise PolicyError(f"protected-path policy {source} is invalid: {exc}") from exc


def check_records(
    records: Iterable[AuditRecord], policy: ProtectedPaths, home: Path, blobs: BlobStore | None = None
) -> list[Finding]:
    """Every protected-path finding in ``records``, in log order.

    ``blobs`` holds the payloads moved out of the records (default: the home's ``audit/blobs``).
    """
    scanner = _Scanner(policy.for_home(home), blobs or BlobStore(Path(home) / "audit" / "blobs"))
    scan = {a.value for a in policy.scan_actors}
    opaque = set(policy.opaque_blob_events)
    findings: list[Finding] = []
    for record in records:
        findings.extend(_record_findings(record, scanner, scan, set(policy.finding_events), opaque))
    return findings


def _record_findings(
    record: AuditRecord, scanner: _Scanner, scan: set[str], finding_events: set[str], opaque: set[str]
) -> list[Finding]:
    base = dict(
        seq=record.seq,
        ts=record.ts,
        run_id=record.run_id,
        actor=record.actor.value,
        event=record.event,
        ticket_id=ticket_of(record),
    )
    if record.event in finding_events:
        hits = [
            h for h in dict.fromkeys(scanner.paths(record.payload, open_blobs=True)) if h[1] != _UNSCANNED
        ]
        path = subject(record.payload) or (hits[0][0] if hits else "")
        pattern = hits[0][1] if hits else None
        return [Finding(**base, kind="event", path=path, pattern=pattern)]
    if record.actor.value not in scan:
        return []
    hits = list(dict.fromkeys(scanner.paths(record.payload, open_blobs=record.event not in opaque)))
    return [
        Finding(**base, kind=kind, path=p, pattern=pat)
        for p, pat, kind in ((p, pat, "unscanned" if pat == _UNSCANNED else "argument") for p, pat in hits)
    ]


_UNSCANNED = "<blob not scanned>"
_SUBJECT_KEYS = ("address", "argv", "library", "reason")  # what an event without a path names


def ticket_of(record: AuditRecord) -> str | None:
    """The ticket a record is about: ``ticket_id`` (runner, sandbox) or ``ticket`` (code agent, judge)."""
    for key in ("ticket_id", "ticket"):
        value = record.payload.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def subject(payload: Mapping[str, object]) -> str:
    """What a finding event names: its path, else its address, command, library (and symbol) or reason."""
    if isinstance(path := payload.get("path"), str) and path:
        return path
    detail = payload.get("detail")
    detail = detail if isinstance(detail, dict) else {}
    for key in _SUBJECT_KEYS:
        if isinstance(value := detail.get(key), str) and value:
            symbol = detail.get("symbol")
            return f"{value}: {symbol}" if key == "library" and isinstance(symbol, str) else value
    return ""


class _Scanner:
    """Finds protected path-like tokens in a payload, following blob references into their content."""

    def __init__(self, patterns: list[str], blobs: BlobStore) -> None:
        self.patterns = patterns
        self.blobs = blobs

    def paths(self, value: Any, *, open_blobs: bool, depth: int = 0) -> Iterator[tuple[str, str]]:
        """(path, first matching pattern) for each protected token; (ref, _UNSCANNED) for a blob not read."""
        for token in _strings(value):
            if open_blobs and BLOB_REF.match(token):
                yield from self._blob(token, depth)
                continue
            for part in (t for t in _SPLIT.split(token) if "/" in t):
                pattern = match_protected(part, self.patterns)
                if pattern is not None:
                    yield part, pattern

    def _blob(self, ref: str, depth: int) -> Iterator[tuple[str, str]]:
        path = self.blobs.path_for(ref)
        try:
            too_big = path.stat().st_size > MAX_SCAN_BLOB_BYTES
            data = b"" if too_big or depth >= MAX_BLOB_DEPTH else self.blobs.get(ref)
        except (OSError, DataError):
            yield ref, _UNSCANNED
            return
        if too_big or depth >= MAX_BLOB_DEPTH:
            yield ref, _UNSCANNED
            return
        try:
            content: Any = json.loads(data)
        except ValueError:
            content = data.decode("utf-8", errors="replace")
        yield from self.paths(content, open_blobs=True, depth=depth + 1)


def match_protected(path: str, patterns: list[str]) -> str | None:
    """The first pattern that ``path`` (as written or normalised) matches, or None."""
    candidates = {path, os.path.normpath(path), path.rstrip("/")}
    for pattern in patterns:
        if any(fnmatchcase(c, pattern) for c in candidates if c):
            return pattern
    return None


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value, dict keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
