"""The writer: chain form, blobs, anchoring cadence, recovery of a torn tail."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from audit import GENESIS_HASH, INLINE_MAX_BYTES, AuditLog, FileAnchorStore, MemoryAnchorStore, verify_log
from audit.reader import iter_records
from segfactory.errors import DataError
from segfactory.home import Home
from segfactory.records import canonical_json
from tests.audit.conftest import log_lines


def test_records_form_a_chain_of_canonical_lines(home: Home) -> None:
    with AuditLog(home, None) as log:
        first = log.append("proposer", "tool_call", {"tool": "read_file", "args": {"path": "x"}}, run_id="r1")
        second = log.append("human", "approve", {"id": "d1"})
    assert (first.seq, first.prev) == (0, GENESIS_HASH)
    assert (second.seq, second.prev) == (1, first.hash)
    lines = log_lines(home)
    assert lines[0] == canonical_json(first.model_dump(mode="json")) + b"\n"
    assert all(r.computed_hash() == r.hash for r in iter_records(home.audit / "log.jsonl"))


def test_unknown_actor_is_refused(home: Home) -> None:
    with AuditLog(home, None) as log, pytest.raises(ValueError):
        log.append("intruder", "x", {})


def test_blob_round_trip_and_addressing(home: Home) -> None:
    data = b'{"model": "m", "messages": [\xff binary \x00 bytes]}'
    with AuditLog(home, None) as log:
        ref = log.put_blob(data)
        assert ref == "blob:" + hashlib.sha256(data).hexdigest()
        assert log.put_blob(data) == ref  # content-addressed: stored once
        assert (home.audit / "blobs" / ref[5:]).read_bytes() == data
        assert log.blobs.get(ref) == data
        big = "v" * (INLINE_MAX_BYTES + 1)
        record = log.append("proposer", "llm_request", {"request": ref, "note": big, "small": 1})
    assert record.payload["request"] == ref and record.payload["small"] == 1
    assert json.loads(log.blobs.get(record.payload["note"])) == big
    assert verify_log(home.audit, None, anchor_checked=False).ok


def test_altered_or_missing_blob_fails_verify(home: Home) -> None:
    with AuditLog(home, None) as log:
        ref = log.put_blob(b"request bytes")
        other = log.put_blob(b"response bytes")
        log.append("proposer", "llm_exchange", {"request": ref, "response": other})
    (home.audit / "blobs" / ref[5:]).write_bytes(b"request bytez")
    (home.audit / "blobs" / other[5:]).unlink()
    with pytest.raises(DataError, match="altered"):
        log.blobs.get(ref)
    problems = verify_log(home.audit, None, anchor_checked=False).problems
    assert any("altered" in p for p in problems) and any("missing" in p for p in problems)


def test_anchors_every_batch_and_at_run_end(home: Home) -> None:
    store = MemoryAnchorStore()
    log = AuditLog(home, store, anchor_every_records=4, anchor_every_s=60)
    for i in range(10):
        log.append("runner", "step", {"i": i}, run_id="r1")
    assert [a.seq for a in store.history()] == [3, 7]
    assert verify_log(home.audit, store.get()).unanchored_from == 8
    log.close_run("r1")
    assert store.get() is not None and store.get().seq == 9 and store.get().run_id == "r1"  # type: ignore[union-attr]
    assert verify_log(home.audit, store.get(), strict=True).ok
    log.close()


def test_idle_writer_is_anchored_by_the_timer(home: Home) -> None:
    store = MemoryAnchorStore()
    log = AuditLog(home, store, anchor_every_records=100, anchor_every_s=0.2)
    log.append("runner", "step", {})
    deadline = time.monotonic() + 5
    while store.get() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.get() is not None and store.get().seq == 0  # type: ignore[union-attr]
    log.close()


class _DownStore(MemoryAnchorStore):
    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        raise ConnectionError("gate down")


def test_failed_anchoring_keeps_records_and_shows_the_window(home: Home) -> None:
    store = _DownStore()
    log = AuditLog(home, store, anchor_every_records=2, anchor_every_s=60)
    for i in range(5):
        log.append("runner", "step", {"i": i})
    assert log.anchor_failures == 2
    with pytest.raises(ConnectionError):
        log.close_run("r1")
    report = verify_log(home.audit, store.get())
    assert report.ok and report.unanchored_from == 0
    records = list(iter_records(home.audit / "log.jsonl"))
    assert [r.event for r in records].count("step") == 5
    failed = [r for r in records if r.event == "anchor_failed"]  # each failure is on the record
    assert len(failed) == 3 and all("gate down" in r.payload["error"] for r in failed)
    assert [r.payload["seq"] for r in failed] == [1, 4, 6]
    assert any("anchoring failed at 3 point(s)" in w for w in report.warnings)
    log.anchor = None
    log.close()


def test_file_anchor_store_round_trip(home: Home) -> None:
    store = FileAnchorStore(home.root / "anchor.json")
    assert store.get() is None
    store.put(3, "a" * 64, "r9")
    anchor = store.get()
    assert anchor is not None and (anchor.seq, anchor.hash, anchor.run_id) == (3, "a" * 64, "r9")


def test_torn_tail_is_moved_aside_and_the_chain_continues(home: Home) -> None:
    with AuditLog(home, None) as log:
        for i in range(3):
            log.append("runner", "step", {"i": i})
    torn = b'{"actor":"runner","event":"st'
    with open(home.audit / "log.jsonl", "ab") as fh:
        fh.write(torn)
    with AuditLog(home, None) as log:
        record = log.append("runner", "after", {})
    records = list(iter_records(home.audit / "log.jsonl"))
    recovered = records[3]
    assert recovered.event == "log_recovered" and recovered.actor.value == "system"
    assert recovered.payload["torn_sha256"] == hashlib.sha256(torn).hexdigest()
    assert (home.audit / recovered.payload["moved_to"]).read_bytes() == torn
    assert record.seq == 4 and record.prev == recovered.hash
    assert verify_log(home.audit, None, anchor_checked=False).ok


def test_writer_refuses_to_extend_an_altered_tail(home: Home) -> None:
    with AuditLog(home, None) as log:
        log.append("runner", "step", {})
    with open(home.audit / "log.jsonl", "ab") as fh:
        fh.write(b"garbage\n")
    with pytest.raises(DataError, match="not an audit record"):
        AuditLog(home, None)
