"""The run report's audit section lists each finding of the run with its ticket, not counts only."""

from __future__ import annotations

from pathlib import Path

from agents import report as rpt
from agents._report_md import render_markdown
from agents.state import FactoryState
from audit import AuditLog
from segfactory.home import Home


def _attempt(log: AuditLog, kind: str, ticket: str, run: str, path: str | None, **detail: object) -> None:
    event = {"kind": kind, "ts": 1.0, "path": path, "sandbox_reported": True, "detail": detail}
    log.append("sandbox", kind, {**event, "ticket_id": ticket, "attempt": 1}, run_id=run)


def _report(audit: rpt.AuditSummary) -> str:
    report = rpt.RunReport(
        run_id="r1",
        profile="demo",
        proposer="rules",
        backend="bwrap",
        stop_reason="done",
        started_at=1.0,
        ended_at=2.0,
        win_rule_sha256=None,
        tickets=[],
        not_run=[],
        approvals=[],
        counts=rpt.counts([], FactoryState(run_id="r1")),
        device_seconds=0.0,
        milestone=None,
        audit=audit,
        llm_usage={},
        analysis_dir=None,
    )
    return render_markdown(report)


def test_each_finding_of_the_run_is_listed_with_its_ticket(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.audit.mkdir(parents=True)
    with AuditLog(home, None) as log:
        _attempt(log, "file_open", "r1-t001", "r1", f"{home.root}/vault/seeds.json", op="open")
        _attempt(log, "socket_call", "r1-t001", "r1", None, op="connect", address="('10.0.2.2', 80)")
        _attempt(log, "file_write", "r1-t002", "r1", "/opt/\x1b[31mred", op="open")
        _attempt(log, "file_open", "r0-t009", "r0", "/proc/1/environ", op="open")  # another run
        log.append(
            "system", "ticket_held", {"ticket": "r1-t001", "pending": "audit", "findings": []}, run_id="r1"
        )
    audit = rpt.audit_summary(home, "r1", None, anchor_checked=False)
    assert audit.findings == 4 and audit.run_findings_total == 3 and not audit.run_findings_truncated
    assert [(f.ticket_id, f.event, f.path) for f in audit.run_findings] == [
        ("r1-t001", "file_open", f"{home.root}/vault/seeds.json"),
        ("r1-t001", "socket_call", "('10.0.2.2', 80)"),
        ("r1-t002", "file_write", "/opt/\x1b[31mred"),
    ]
    assert audit.held_for_findings == ["r1-t001"]
    md = _report(audit)
    assert "findings in this run: 3; tickets held for a person: r1-t001" in md
    assert f"ticket `r1-t001`: file_open `{home.root}/vault/seeds.json`" in md
    assert "ticket `r1-t001`: socket_call `('10.0.2.2', 80)`" in md
    assert "ticket `r1-t002`: file_write `/opt/\\x1b[31mred`" in md and "\x1b" not in md  # never raw
    assert "/proc/1/environ" not in md


def test_a_run_without_findings_says_so(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.audit.mkdir(parents=True)
    with AuditLog(home, None) as log:
        log.append("runner", "ticket_attempt", {"ticket_id": "r1-t001"}, run_id="r1")
    audit = rpt.audit_summary(home, "r1", None, anchor_checked=False)
    assert audit.run_findings == [] and "findings in this run: none" in _report(audit)
