"""Tamper tests: every way of altering the log is caught, the re-hashed chain only by the anchor."""

from __future__ import annotations

import json

from audit import GENESIS_HASH, AuditLog, MemoryAnchorStore, VerifyReport, verify_log
from segfactory.home import Home
from segfactory.records import AuditRecord, canonical_json
from tests.audit.conftest import RECORDS, log_lines, write_lines


def _verify(home: Home, store: MemoryAnchorStore, *, strict: bool = False) -> VerifyReport:
    return verify_log(home.audit, store.get(), strict=strict, history=store.history())


def _rehash_from(lines: list[bytes], start: int) -> list[bytes]:
    """Recompute hash and prev of every record from ``start`` on: what a forger with write access does."""
    out = list(lines[:start])
    prev = GENESIS_HASH if start == 0 else json.loads(lines[start - 1])["hash"]
    for seq, raw in enumerate(lines[start:], start=start):
        body = json.loads(raw)
        body.update(seq=seq, prev=prev, hash="")
        record = AuditRecord.model_validate(body)
        body["hash"] = prev = record.computed_hash()
        out.append(canonical_json(body) + b"\n")
    return out


def _edit(raw: bytes, **changes: object) -> bytes:
    body = json.loads(raw)
    body.update(changes)
    return canonical_json(body) + b"\n"


def test_intact_log_agrees_with_anchor(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    report = _verify(home, store)
    assert report.ok, report.problems
    assert report.records == RECORDS
    assert report.head_seq == RECORDS - 1
    assert report.anchor is not None and report.anchor.seq == RECORDS - 1
    assert report.unanchored_from is None
    assert set(report.to_json()) >= {
        "ok",
        "records",
        "head_seq",
        "head_hash",
        "anchor",
        "unanchored_from",
        "problems",
    }


def test_edited_record(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    lines[4] = _edit(lines[4], payload={"i": 400})
    write_lines(home, lines)
    report = _verify(home, store)
    assert not report.ok
    assert any("seq 4" in p and "edited" in p for p in report.problems)


def test_edited_record_rehashed_alone(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    lines[4] = _edit(lines[4], payload={"i": 400})
    write_lines(home, _rehash_from(lines, 4)[:5] + lines[5:])
    report = _verify(home, store)
    assert not report.ok
    assert any("seq 5" in p and "prev" in p for p in report.problems)


def test_deleted_record(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    del lines[3]
    write_lines(home, lines)
    report = _verify(home, store)
    assert not report.ok
    assert any("expected seq 3" in p for p in report.problems)
    assert any("prev" in p for p in report.problems)


def test_reordered_records(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    lines[3], lines[4] = lines[4], lines[3]
    write_lines(home, lines)
    report = _verify(home, store)
    assert not report.ok
    assert any("expected seq 3" in p for p in report.problems)


def test_inserted_record(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    forged = _rehash_from([*lines[:6], _edit(lines[5], event="forged")], 6)[6]
    write_lines(home, [*lines[:6], forged, *lines[6:]])
    report = _verify(home, store)
    assert not report.ok
    assert any("prev" in p for p in report.problems)


def test_fully_rehashed_chain_is_caught_only_by_the_anchor(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    lines[2] = _edit(lines[2], payload={"i": 222})
    write_lines(home, _rehash_from(lines, 2))
    assert verify_log(home.audit, None, anchor_checked=False).ok  # the chain alone cannot tell
    report = _verify(home, store)
    assert not report.ok
    assert any("rewritten" in p for p in report.problems)


def test_truncated_tail(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    write_lines(home, log_lines(home)[:-3])
    assert verify_log(home.audit, None, anchor_checked=False).ok
    report = _verify(home, store)
    assert not report.ok
    assert any("beyond the last record" in p for p in report.problems)


def test_unanchored_window_is_reported(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, _ = anchored
    store = MemoryAnchorStore()
    store.put(RECORDS - 1, json.loads(log_lines(home)[-1])["hash"], "r1")
    log = AuditLog(home, None)
    for i in range(3):
        log.append("runner", "late", {"i": i}, run_id="r2")
    log.close()
    report = _verify(home, store)
    assert report.ok and report.unanchored_from == RECORDS and report.head_seq == RECORDS + 2
    strict = _verify(home, store, strict=True)
    assert not strict.ok and any("unanchored window" in p for p in strict.problems)


def test_torn_tail_is_a_warning_not_a_problem(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    with open(home.audit / "log.jsonl", "ab") as fh:
        fh.write(b'{"actor":"runner","ev')
    report = _verify(home, store)
    assert report.ok and report.torn_tail is not None and report.torn_tail.size == 21
    assert report.records == RECORDS and any("torn" in w for w in report.warnings)


def test_garbage_line_is_a_problem(anchored: tuple[Home, MemoryAnchorStore]) -> None:
    home, store = anchored
    lines = log_lines(home)
    lines[1] = b"not json\n"
    write_lines(home, lines)
    report = _verify(home, store)
    assert not report.ok and any("line 2: not an audit record" in p for p in report.problems)
