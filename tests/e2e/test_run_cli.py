"""Fast contract tests of ``run``, ``report`` and ``approvals``: bad input fails with one line on
stderr before anything is set up (no home is created)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--proposer", "gpt:4"], "proposer 'gpt:4' is not registered; known: rules"),
        (["--profile", "tiny"], "profile 'tiny' is not defined; known: demo, default"),
        (["--backend", "k8s"], "sandbox backend 'k8s' is not registered; known: bwrap, docker"),
        (["--budget", "soon"], "--budget 'soon'"),
        (
            ["--judge", "gpt:4"],
            "judge 'gpt:4' is not registered; known: rules, llm:anthropic:MODEL, llm:local:URL",
        ),
        (["--code-agent"], "--code-agent needs an LLM proposer"),
    ],
)
def test_run_refuses_bad_input_before_any_set_up(
    cli: Cli, tmp_home: Path, args: list[str], message: str
) -> None:
    result = cli("run", "--home", str(tmp_home), *args)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith("segfactory: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not tmp_home.exists()


def test_a_vendor_proposer_without_its_key_fails_before_any_set_up(cli: Cli, tmp_home: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    result = cli("run", "--home", str(tmp_home), "--proposer", "anthropic:claude-x", env=env)
    assert result.returncode != 0 and "ANTHROPIC_API_KEY is not set" in result.stderr
    assert not tmp_home.exists()


def test_report_of_an_unknown_run_says_how_to_finish_it(cli: Cli, tmp_home: Path) -> None:
    result = cli("report", "r-none", "--home", str(tmp_home), "--json")
    assert result.returncode != 0 and result.stdout == ""
    assert "run 'r-none' has no report" in result.stderr and "--resume r-none" in result.stderr


def test_approvals_list_without_any_run_state(cli: Cli, tmp_home: Path) -> None:
    result = cli("approvals", "list", "--home", str(tmp_home), "--json")
    assert result.returncode != 0 and "no run state" in result.stderr


def test_approvals_list_shows_escalations_beside_data_requests(cli: Cli, tmp_path: Path) -> None:
    from agents.approvals import ApprovalQueue
    from agents.judge import Decision, JudgeDecision
    from audit import AuditLog, MemoryAnchorStore
    from segfactory.home import Home
    from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind

    home = Home.resolve(tmp_path / "home")
    home.root.mkdir(parents=True)
    ticket = Ticket(
        id="r1-t003",
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="more epochs",
        change={"epochs": 6},
        budget=Budget(device_seconds=60, epochs=6),
        seed=1,
        expected_effect=ExpectedEffect(metric="dice", slice="all", direction=Direction.UP, size=0.01),
    )
    decision = JudgeDecision(
        ticket_id=ticket.id, decision=Decision.ESCALATE, reason="looks like seed noise", by="llm"
    )
    with AuditLog(home, MemoryAnchorStore()) as log:
        ApprovalQueue(home.state_db, log).escalate(ticket, decision, "r1", pending="replicate")
    result = cli("approvals", "list", "--home", str(home.root), "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert listed["requests"] == []
    assert [
        (e["id"], e["kind"], e["ticket_id"], e["pending"], e["status"], e["judge_reason"])
        for e in listed["escalations"]
    ] == [("r1-t003-esc", "escalation", "r1-t003", "replicate", "pending", "looks like seed noise")]
    text = cli("approvals", "list", "--home", str(home.root), "--status", "pending")
    assert "r1-t003-esc  pending   run r1  escalation: approve to replicate r1-t003" in text.stdout
