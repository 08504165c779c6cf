"""Limits fail loudly in the record: a cut output or tool result says so, with its original size."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from audit import INLINE_MAX_BYTES, AuditLog, BlobStore, iter_records
from segfactory.home import Home
from tests.audit.conftest import HOSTILE_WORKER, run_code_ticket

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
NOISY_BYTES = 50_000  # what the worker below writes to stderr: past the runner's tail


def _value(home: Home, value: object) -> object:
    """A payload value as written: one past INLINE_MAX_BYTES lives in a blob (its canonical JSON)."""
    if isinstance(value, str) and value.startswith("blob:"):
        return json.loads(BlobStore(home.audit / "blobs").get(value))
    return value


def test_a_tickets_cut_stderr_is_recorded_as_cut(tmp_path: Path) -> None:
    from runner._launch import TAIL_BYTES

    noisy = HOSTILE_WORKER.replace("args = dict(", f'sys.stderr.write("e" * {NOISY_BYTES})\nargs = dict(', 1)
    home = run_code_ticket(tmp_path, noisy, "noisy")
    attempt = next(r for r in iter_records(home.audit / "log.jsonl") if r.event == "ticket_attempt")
    assert attempt.payload["stderr_truncated"] is True
    assert attempt.payload["stderr_bytes"] >= NOISY_BYTES
    assert (
        len(str(_value(home, attempt.payload["stderr_tail"]))) == TAIL_BYTES
        and attempt.payload["stdout_truncated"] is False
    )


def test_a_code_agents_long_arguments_and_cut_result_are_on_the_record(home: Home) -> None:
    from agents.code_agent import MAX_TOOL_OUTPUT_CHARS, CodeTools, sandbox_runner
    from agents.workspace import Workspace

    work = home.root / "ws"
    work.mkdir(parents=True)
    arguments = json.dumps(
        {"command": ["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' a; : " + "p" * 6000], "timeout_s": 30}
    )
    with AuditLog(home, None) as log:
        tools = CodeTools(Workspace(work), sandbox_runner("bwrap"), log, run_id="r1", ticket_id="t1")
        shown = tools.call("run", arguments)
    record = next(r for r in iter_records(home.audit / "log.jsonl") if r.event == "tool_call")
    assert (
        len(arguments) > INLINE_MAX_BYTES and _value(home, record.payload["arguments"]) == arguments
    )  # whole
    assert record.payload["result_truncated"] is True
    assert record.payload["result_chars"] > 20_000 > MAX_TOOL_OUTPUT_CHARS >= len(shown) - 64
    assert _value(home, record.payload["result"]) == shown
