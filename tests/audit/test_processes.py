"""Real processes: kill -9 during a write, and two writers on one home keeping one chain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

from audit import AuditLog, FileAnchorStore, verify_log
from audit.reader import iter_records, read_lines
from segfactory.home import Home
from tests.conftest import REPO

WAIT_S = 20  # a child that has not reached its state by then fails the test


def _spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# The real writer, with os.write cut so that it puts out half a record and then hangs: the
# parent kills it with SIGKILL in the middle of that write.
HALF_WRITE = """
    import os, sys, time
    from pathlib import Path
    from audit import AuditLog
    from segfactory.home import Home
    log = AuditLog(Home(Path(sys.argv[1])), None)
    for i in range(5):
        log.append("runner", "step", {"i": i})
    real_write = os.write
    def half_then_hang(fd, data):
        real_write(fd, bytes(data)[: len(data) // 2])
        Path(sys.argv[1], "half-written").touch()
        time.sleep(60)
    os.write = half_then_hang
    log.append("runner", "step", {"i": 5, "text": "never completed"})
"""


def test_kill_9_mid_write_verifies_to_last_record_and_writer_recovers(home: Home) -> None:
    proc = _spawn(HALF_WRITE, str(home.root))
    try:
        _wait_for(lambda: (home.root / "half-written").exists(), "the half write")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    report = verify_log(home.audit, None, anchor_checked=False)
    assert report.ok and report.records == 5 and report.head_seq == 4
    assert report.torn_tail is not None and report.torn_tail.size > 0
    store = FileAnchorStore(home.root / "anchor.json")
    with AuditLog(home, store) as log:
        after = log.append("runner", "after_crash", {})
    records = list(iter_records(home.audit / "log.jsonl"))
    assert [r.event for r in records[-2:]] == ["log_recovered", "after_crash"]
    assert after.seq == 6
    final = verify_log(home.audit, store.get(), strict=True)
    assert final.ok and final.torn_tail is None, final.problems


LOOP = """
    import sys, time
    from pathlib import Path
    from audit import AuditLog
    from segfactory.home import Home
    log = AuditLog(Home(Path(sys.argv[1])), None)
    name, count = sys.argv[2], int(sys.argv[3])
    while len(sys.argv) > 4 and not Path(sys.argv[4]).exists():  # start together
        time.sleep(0.001)
    for i in range(count):
        log.append("runner", "step", {"writer": name, "i": i, "pad": "x" * 300})
    log.close()
"""


def test_kill_9_during_an_append_loop_leaves_a_verifiable_log(home: Home) -> None:
    proc = _spawn(LOOP, str(home.root), "a", "100000")
    log_path = home.audit / "log.jsonl"
    try:
        _wait_for(lambda: log_path.exists() and log_path.stat().st_size > 20_000, "appends")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    lines, _ = read_lines(log_path)
    assert verify_log(home.audit, None, anchor_checked=False).ok
    with AuditLog(home, None) as log:
        log.append("runner", "after_crash", {})
    report = verify_log(home.audit, None, anchor_checked=False)
    assert report.ok and report.records >= len(lines) + 1


def test_two_processes_keep_one_chain(home: Home) -> None:
    per_writer = 200
    go = home.root / "go"
    procs = [_spawn(LOOP, str(home.root), name, str(per_writer), str(go)) for name in ("a", "b")]
    _wait_for(lambda: (home.audit / "log.lock").exists(), "the writers to open the log")
    time.sleep(0.3)
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    report = verify_log(home.audit, None, anchor_checked=False)
    assert report.ok, report.problems
    assert report.records == 2 * per_writer
    records = list(iter_records(home.audit / "log.jsonl"))
    for name in ("a", "b"):
        assert [r.payload["i"] for r in records if r.payload["writer"] == name] == list(range(per_writer))
    switches = sum(
        a.payload["writer"] != b.payload["writer"] for a, b in zip(records, records[1:], strict=False)
    )
    assert switches >= 2, "the two writers did not overlap; the test proved nothing"
