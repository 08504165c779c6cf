"""``segfactory audit verify | check | show`` through the real entry point.

The protected reads checked and shown here were made by a real ticket's worker, run by the runner
in bwrap (``ticket_home``), never written into the log by the test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable

import pytest

from audit import AuditLog, FileAnchorStore
from segfactory.home import Home
from tests.audit.conftest import DECOY_READ, HOSTILE_TICKET, log_lines, write_lines
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def _fill(home: Home) -> str:
    """A small log anchored in a file; returns the --anchor value."""
    anchor = home.root / "anchor.json"
    with AuditLog(home, FileAnchorStore(anchor)) as log:
        log.append(
            "code-agent",
            "tool_call",
            {"tool": "read_file", "args": {"path": "/work/config.yaml"}},
            run_id="r1",
        )
        log.append("human", "approval_decided", {"id": "d1"}, run_id="r1")
        log.append("gate", "gate.verdict", {"ticket_id": "t1"}, run_id="r2")
        log.close_run("r2")
    return f"file:{anchor}"


def test_verify_json_then_tamper(home: Home, cli: Cli) -> None:
    anchor = _fill(home)
    ok = cli("audit", "verify", "--json", "--anchor", anchor, "--home", str(home.root))
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] and report["records"] == 3 and report["head_seq"] == 2
    assert report["anchor"]["seq"] == 2 and report["unanchored_from"] is None and report["problems"] == []
    lines = log_lines(home)
    write_lines(home, [lines[0], lines[2]])
    bad = cli("audit", "verify", "--json", "--anchor", anchor, "--home", str(home.root))
    assert bad.returncode == 1
    assert not json.loads(bad.stdout)["ok"] and json.loads(bad.stdout)["problems"]


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_check_exits_non_zero_on_a_tickets_reads(ticket_home: Home, cli: Cli, _: None) -> None:
    result = cli("audit", "check", "--json", "--home", str(ticket_home.root))
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)["findings"]
    found = {(f["actor"], f["event"], f["kind"], f["path"]) for f in findings}
    assert ("sandbox", "protected_read_attempt", "event", DECOY_READ) in found, findings
    assert ("sandbox", "file_open", "event", "/proc/1/environ") in found, findings
    assert {(f["run_id"], f["ticket_id"]) for f in findings} == {("r1", HOSTILE_TICKET)}


def test_check_passes_a_clean_log(home: Home, cli: Cli) -> None:
    with AuditLog(home, None) as log:
        log.append("code-agent", "tool_call", {"tool": "read_file", "args": {"path": "/work/config.yaml"}})
    result = cli("audit", "check", "--json", "--home", str(home.root))
    assert result.returncode == 0 and json.loads(result.stdout) == {"findings": [], "ok": True}


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_show_filters(ticket_home: Home, cli: Cli, _: None) -> None:
    home = str(ticket_home.root)
    result = cli(
        "audit",
        "show",
        "--json",
        "--run",
        "r1",
        "--actor",
        "sandbox",
        "--event",
        "protected_read_attempt",
        "--since",
        "1h",
        "--home",
        home,
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["count"] >= 1 and {r["payload"]["path"] for r in shown["records"]} == {DECOY_READ}
    assert {r["payload"]["ticket_id"] for r in shown["records"]} == {HOSTILE_TICKET}
    table = cli("audit", "show", "--event", "ticket_attempt", "--home", home)
    assert (
        table.returncode == 0
        and "ticket_attempt" in table.stdout
        and "protected_read_attempt" not in table.stdout
    )
    unknown = cli("audit", "show", "--actor", "intruder", "--home", home)
    assert unknown.returncode == 2 and "unknown actor 'intruder'" in unknown.stderr
