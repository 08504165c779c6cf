"""``audit verify``: the chain is intact and agrees with its anchor.

The chain alone catches an edited, deleted, reordered or inserted record (each breaks a hash, a
``prev`` link or the consecutive ``seq``). Only the anchor catches a chain that was rewritten and
fully re-hashed, or a tail that was cut off: its (seq, hash) must be in the log. Records after the
anchored seq are the unanchored window; it must be empty at the end of a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from audit.blobs import BlobStore, blob_refs
from audit.log import GENESIS_HASH
from audit.reader import LOG_NAME, Line, TornTail, read_lines
from segfactory.records import Anchor

MAX_PROBLEMS = 100  # past this, verify stops listing problems and says how many it left out


class VerifyJson(TypedDict):
    """``VerifyReport.to_json``: what ``audit verify --json`` prints and the console's chain banner."""

    ok: bool
    records: int
    head_seq: int | None
    head_hash: str | None
    anchor: dict[str, object] | None  # the anchor record's own JSON form
    anchor_checked: bool
    unanchored_from: int | None
    problems: list[str]
    warnings: list[str]
    torn_tail: dict[str, object] | None  # offset, size and sha256 of the torn bytes


@dataclass
class VerifyReport:
    """What ``audit verify --json`` prints (keys documented in docs/cli.md)."""

    ok: bool
    records: int
    head_seq: int | None
    head_hash: str | None
    anchor: Anchor | None
    anchor_checked: bool
    unanchored_from: int | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    torn_tail: TornTail | None = None

    def to_json(self) -> VerifyJson:
        return {
            "ok": self.ok,
            "records": self.records,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "anchor": self.anchor.model_dump(mode="json") if self.anchor else None,
            "anchor_checked": self.anchor_checked,
            "unanchored_from": self.unanchored_from,
            "problems": self.problems,
            "warnings": self.warnings,
            "torn_tail": None if self.torn_tail is None else vars(self.torn_tail),
        }


class _Problems(list[str]):
    def add(self, text: str) -> None:
        if len(self) < MAX_PROBLEMS:
            self.append(text)
        elif len(self) == MAX_PROBLEMS:
            self.append(f"... more problems not listed (limit {MAX_PROBLEMS})")


def verify_log(
    audit_dir: Path,
    anchor: Anchor | None,
    *,
    anchor_checked: bool = True,
    strict: bool = False,
    history: Sequence[Anchor] = (),
) -> VerifyReport:
    """Check the log in ``audit_dir`` against ``anchor`` (None: nothing was ever anchored).

    ``history`` holds every earlier anchor (``AnchorStore.history``); each must be in the log too,
    since a log that was cut and then grown past its old head agrees with a new latest anchor
    only. ``anchor_checked=False`` means no anchor store was consulted (a warning, not a pass of
    the anchor checks). ``strict`` also fails on an unanchored window (use it at the end of a run).
    """
    lines, torn = read_lines(audit_dir / LOG_NAME)
    problems = _Problems()
    hashes = _check_chain(lines, problems)
    _check_blobs(lines, BlobStore(audit_dir / "blobs"), problems)
    head_seq = len(hashes) - 1 if hashes else None
    head_hash = hashes[-1] if hashes else None
    warnings: list[str] = []
    if torn is not None:
        warnings.append(
            f"torn last record: {torn.size} bytes after the last newline (a writer was killed "
            "mid-write); the next writer moves them aside and records log_recovered"
        )
    if anchor_checked:
        for earlier in _distinct(history, anchor):
            _check_anchor(earlier, hashes, problems)
        _check_anchor(anchor, hashes, problems)
        failures = [r.record.seq for r in lines if r.record is not None and r.record.event == "anchor_failed"]
        if failures:
            warnings.append(
                f"anchoring failed at {len(failures)} point(s) (anchor_failed records at seq "
                f"{', '.join(map(str, failures[:10]))}); see `audit show --event anchor_failed`"
            )
    else:
        warnings.append("no anchor store consulted: a fully re-hashed chain or a cut tail would pass")
    unanchored_from = _unanchored_from(anchor, head_seq) if anchor_checked else None
    if strict and unanchored_from is not None:
        problems.add(f"unanchored window: records {unanchored_from}..{head_seq} are not anchored")
    return VerifyReport(
        ok=not problems,
        records=len(lines),
        head_seq=head_seq,
        head_hash=head_hash,
        anchor=anchor,
        anchor_checked=anchor_checked,
        unanchored_from=unanchored_from,
        problems=list(problems),
        warnings=warnings,
        torn_tail=torn,
    )


def _check_chain(lines: list[Line], problems: _Problems) -> list[str]:
    """Walk the lines; return the hash at each seq position as the file claims it."""
    hashes: list[str] = []
    prev = GENESIS_HASH
    for index, line in enumerate(lines):
        record = line.record
        if record is None:
            problems.add(f"line {line.number}: not an audit record ({line.error})")
            hashes.append("")
            prev = ""
            continue
        where = f"line {line.number} (seq {record.seq})"
        if record.seq != index:
            problems.add(f"{where}: expected seq {index}; a record was deleted, inserted or moved")
        if record.prev != prev:
            problems.add(f"{where}: prev does not match the hash of the record before it")
        if record.computed_hash() != record.hash:
            problems.add(f"{where}: hash does not match the record's content; it was edited")
        hashes.append(record.hash)
        prev = record.hash
    return hashes


def _check_blobs(lines: list[Line], blobs: BlobStore, problems: _Problems) -> None:
    seen: set[str] = set()
    for line in lines:
        if line.record is None:
            continue
        for ref in blob_refs(line.record.payload):
            if ref in seen:
                continue
            seen.add(ref)
            problem = blobs.check(ref)
            if problem:
                problems.add(f"line {line.number} (seq {line.record.seq}): {problem}")


def _check_anchor(anchor: Anchor | None, hashes: list[str], problems: _Problems) -> None:
    if anchor is None:
        return
    if anchor.seq >= len(hashes):
        problems.add(
            f"anchor at seq {anchor.seq} lies beyond the last record (seq {len(hashes) - 1}); "
            "the tail of the log was cut off"
        )
    elif hashes[anchor.seq] != anchor.hash:
        problems.add(
            f"record seq {anchor.seq} has hash {hashes[anchor.seq][:12]}…, the anchor says "
            f"{anchor.hash[:12]}…; the chain was rewritten (re-hashed) up to or past the anchor"
        )


def _distinct(history: Sequence[Anchor], latest: Anchor | None) -> list[Anchor]:
    """The earlier anchors, each (seq, hash) once, the latest left out (it is checked on its own)."""
    seen = {(latest.seq, latest.hash)} if latest is not None else set()
    out = []
    for item in history:
        if (item.seq, item.hash) not in seen:
            seen.add((item.seq, item.hash))
            out.append(item)
    return out


def _unanchored_from(anchor: Anchor | None, head_seq: int | None) -> int | None:
    if head_seq is None:
        return None
    first = 0 if anchor is None else anchor.seq + 1
    return first if first <= head_seq else None
