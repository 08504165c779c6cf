"""The global ledger: budgets, replay, cache, milestones, best, anchors, events, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gate.ledger import PENDING, Ledger, LedgerError


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger(tmp_path / "ledger.sqlite")
    led.add_tier_version("confirm-a", 1, 2)
    return led


def test_budget_is_spent_per_tier_version(ledger: Ledger) -> None:
    assert ledger.reserve_query("t1", "confirm-a", 1, "m1")
    assert ledger.reserve_query("t2", "confirm-a", 1, "m2")
    assert not ledger.reserve_query("t3", "confirm-a", 1, "m3")
    assert ledger.budget_left("confirm-a", 1) == 0
    ledger.add_tier_version("confirm-a", 2, 2)
    assert ledger.budget_left("confirm-a", 2) == 2


def test_ticket_ids_are_unique_and_replayable(ledger: Ledger) -> None:
    ledger.reserve_query("t1", "confirm-a", 1, "m1")
    assert ledger.find_query("t1") is not None and ledger.find_query("t1").verdict == PENDING  # type: ignore[union-attr]
    ledger.finish_query("t1", "WIN", "because")
    with pytest.raises(sqlite3.IntegrityError):
        ledger.reserve_query("t1", "confirm-a", 1, "m1")
    assert ledger.budget_left("confirm-a", 1) == 1  # the failed duplicate spent nothing
    assert ledger.cached_verdict("m1", "confirm-a", 1) == ("WIN", "because")


def test_milestone_name_once_and_quota(ledger: Ledger) -> None:
    ledger.start_milestone("m1", "run1", {})
    with pytest.raises(LedgerError, match="already used"):
        ledger.start_milestone("m1", "run2", {})
    ledger.count_milestone_model("sealed", 1, "a", "m1", quota=1)
    ledger.count_milestone_model("sealed", 1, "a", "m1", quota=1)  # same model: free
    with pytest.raises(LedgerError, match="quota"):
        ledger.count_milestone_model("sealed", 1, "b", "m1", quota=1)


def test_best_moves_only_on_promotion_or_retraction(ledger: Ledger) -> None:
    ledger.set_best("a", "/v/a.onnx", "init", "baseline")
    with pytest.raises(LedgerError):
        ledger.set_best("b", "/v/b.onnx", "because-i-said-so", "")
    ledger.set_best("b", "/v/b.onnx", "promotion", "WIN + replicate WIN")
    assert ledger.current_best()["model_sha256"] == "b"  # type: ignore[index]


def test_anchors_and_event_queue(ledger: Ledger) -> None:
    assert ledger.latest_anchor() is None
    ledger.put_anchor(3, "h3", "run1")
    ledger.put_anchor(9, "h9", None)
    assert ledger.latest_anchor()["seq"] == 9  # type: ignore[index]
    for i in range(3):
        ledger.queue_event("e", {"i": i})
    events = ledger.events_after(0)
    assert [e["payload"]["i"] for e in events] == [0, 1, 2]
    assert ledger.ack_events(events[1]["id"]) == 2
    assert [e["payload"]["i"] for e in ledger.events_after(0)] == [2]


_WRITER = """
import sys
from gate.ledger import Ledger
led = Ledger(sys.argv[1])
i = 0
while True:
    led.reserve_query(f"t{i}", "confirm-a", 1, "m")
    led.finish_query(f"t{i}", "NO_WIN", "r")
    led.queue_event("gate.verdict", {"i": i})
    i += 1
"""


WRITER_START_S = 60.0  # the longest the writer may take to make its first write


def _spent(path: Path) -> int:
    with sqlite3.connect(path, timeout=5) as db:
        return int(db.execute("SELECT COALESCE(SUM(spent), 0) FROM tier_versions").fetchone()[0])


def test_survives_kill_9_mid_write(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path).add_tier_version("confirm-a", 1, 10**9)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=Path(__file__).parents[2])
    deadline = time.monotonic() + WRITER_START_S
    while not _spent(path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)  # under load the writer may take seconds to import before its first write
    time.sleep(0.3)  # then kill it in the middle of its write loop
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    led = Ledger(path)
    assert led._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    spent = led.tier_versions()[0].spent
    assert spent > 0 and spent == len(led.queries())  # spend and query landed together
