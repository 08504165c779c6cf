"""``segfactory audit verify | check | show`` through the real entry point."""

from __future__ import annotations

import json
from collections.abc import Callable

from audit import AuditLog, FileAnchorStore
from segfactory.home import Home
from tests.audit.conftest import log_lines, write_lines
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def _fill(home: Home) -> str:
    """A small log anchored in a file; returns the --anchor value."""
    anchor = home.root / "anchor.json"
    with AuditLog(home, FileAnchorStore(anchor)) as log:
        log.append("code-agent", "tool_call", {"tool": "read_file", "args": {"path": "/proc/1/environ"}}, run_id="r1")
        log.append("sandbox", "protected_read_attempt", {"path": "/data/holdout/labels.npy"}, run_id="r1")
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


def test_check_exits_non_zero_on_findings(home: Home, cli: Cli) -> None:
    _fill(home)
    result = cli("audit", "check", "--json", "--home", str(home.root))
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)["findings"]
    assert [(f["seq"], f["kind"], f["path"]) for f in findings] == [
        (0, "argument", "/proc/1/environ"), (1, "event", "/data/holdout/labels.npy")]


def test_check_passes_a_clean_log(home: Home, cli: Cli) -> None:
    with AuditLog(home, None) as log:
        log.append("code-agent", "tool_call", {"tool": "read_file", "args": {"path": "/work/config.yaml"}})
    result = cli("audit", "check", "--json", "--home", str(home.root))
    assert result.returncode == 0 and json.loads(result.stdout) == {"findings": [], "ok": True}


def test_show_filters(home: Home, cli: Cli) -> None:
    _fill(home)
    result = cli("audit", "show", "--json", "--run", "r1", "--actor", "sandbox", "--since", "1h", "--home", str(home.root))
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["count"] == 1 and shown["records"][0]["event"] == "protected_read_attempt"
    table = cli("audit", "show", "--event", "gate.verdict", "--home", str(home.root))
    assert table.returncode == 0 and "gate.verdict" in table.stdout and "tool_call" not in table.stdout
    unknown = cli("audit", "show", "--actor", "intruder", "--home", str(home.root))
    assert unknown.returncode == 2 and "unknown actor 'intruder'" in unknown.stderr
