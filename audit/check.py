"""``audit check``: protected-path reads, found by applying ``policies/protected_paths.yaml``.

Two sources of findings:
- every record whose event is in ``finding_events`` (decoy hits, refused path escapes), whoever
  wrote it: the host saw the attempt;
- every path-like token (one containing ``/``) in the payload of a record written by an actor in
  ``scan_actors`` (tool-call arguments, sandbox commands, sandbox-reported file opens) that
  matches a protected pattern, as written or normalised.

Payload values stored as blobs are not opened (they hold LLM traffic whose prompts may name
protected paths legitimately); the tool calls an LLM asks for are audited as their own records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from segfactory.errors import PolicyError
from segfactory.home import SOURCE_ROOT
from segfactory.records import Actor, AuditRecord

DEFAULT_POLICY = SOURCE_ROOT / "policies" / "protected_paths.yaml"
_SPLIT = re.compile(r"[\s\"'`=,;()\[\]{}<>|&]+")


class ProtectedPaths(BaseModel):
    """The validated policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = 1
    scan_actors: list[Actor]
    finding_events: list[str] = Field(min_length=1)
    patterns: list[str] = Field(min_length=1)

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
    kind: str  # "event": a finding event such as a decoy hit; "argument": a path in a payload
    path: str
    pattern: str | None


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


def check_records(records: Iterable[AuditRecord], policy: ProtectedPaths, home: Path) -> list[Finding]:
    """Every protected-path finding in ``records``, in log order."""
    patterns = policy.for_home(home)
    scan = {a.value for a in policy.scan_actors}
    findings: list[Finding] = []
    for record in records:
        findings.extend(_record_findings(record, patterns, scan, set(policy.finding_events)))
    return findings


def _record_findings(
    record: AuditRecord, patterns: list[str], scan: set[str], finding_events: set[str]
) -> list[Finding]:
    hits = list(dict.fromkeys(_protected_paths(record.payload, patterns)))
    base = dict(seq=record.seq, ts=record.ts, run_id=record.run_id, actor=record.actor.value, event=record.event)
    if record.event in finding_events:
        path = str(record.payload.get("path", "")) or (hits[0][0] if hits else "")
        pattern = hits[0][1] if hits else None
        return [Finding(**base, kind="event", path=path, pattern=pattern)]
    if record.actor.value not in scan:
        return []
    return [Finding(**base, kind="argument", path=p, pattern=pat) for p, pat in hits]


def _protected_paths(value: Any, patterns: list[str]) -> Iterator[tuple[str, str]]:
    """(path, first matching pattern) for each protected path-like token inside ``value``."""
    for token in _tokens(value):
        pattern = match_protected(token, patterns)
        if pattern is not None:
            yield token, pattern


def match_protected(path: str, patterns: list[str]) -> str | None:
    """The first pattern that ``path`` (as written or normalised) matches, or None."""
    candidates = {path, os.path.normpath(path), path.rstrip("/")}
    for pattern in patterns:
        if any(fnmatchcase(c, pattern) for c in candidates if c):
            return pattern
    return None


def _tokens(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield from (t for t in _SPLIT.split(value) if "/" in t)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tokens(key)
            yield from _tokens(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tokens(item)
