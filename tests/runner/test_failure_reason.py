"""A failed ticket's reason quotes the worker's stderr made inert: no terminal escape reaches people."""

from __future__ import annotations

import shutil

import pytest

from audit import AuditLog
from runner import TicketStatus, execute_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion
from tests.runner.conftest import BASE_CONFIG

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
HOSTILE_WORKER = r"""
import sys

sys.stderr.write("training...\n\x1b[31mRED\x1b]0;pwned\x07 \x9b2J done\n")
sys.exit(3)
"""


def test_the_last_stderr_line_enters_the_reason_inert(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    ticket = Ticket(
        id="t1",
        arm="agent-code",
        kind="code",
        hypothesis="a worker that colours the operator's terminal",
        change={"files": {"vision/worker.py": HOSTILE_WORKER}},
        budget={"device_seconds": 60, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=11,
    )
    outcome = execute_ticket(
        ticket,
        home=home,
        dataset_version=dataset,
        backend="bwrap",
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert outcome.status is TicketStatus.FAILED
    assert outcome.reason is not None and "exited with status 3" in outcome.reason
    assert "\\x1b[31mRED\\x1b]0;pwned\\x07 \\x9b2J done" in outcome.reason
    assert not any(c in outcome.reason for c in "\x1b\x07\x9b")
    stored = (home.tickets_dir("r1") / "t1" / "outcome.json").read_text()
    assert "\\u001b" not in stored and "\\\\x1b[31mRED" in stored  # the record people read, too
