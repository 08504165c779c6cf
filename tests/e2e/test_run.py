"""End to end: ``segfactory init`` then ``segfactory run --profile demo`` on a fresh home, through
the real CLI, the real bwrap sandbox, the real gate service and the real audit log.

A small ``--budget`` (10 s of device time) stops the loop after its first ticket, so the test
runs the whole path (verify, gate, baseline analysis, one sandboxed training, the dev rule, the
milestone, the report, the final anchor) in a few minutes.

As root (as CI runs), ``init`` separates the users, so the run takes the path a person's root
start takes (trust rule 1): root verifies the sandbox (its canary goes into the vault, which
``segfactory`` cannot write), delegates the sandbox cgroups, serves the gate as
``segfactory-gate`` and re-starts the command as ``segfactory``, which trains the ticket and
writes the run's records.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

Cli = Callable[..., CliResult]
RUN_BUDGET = "10s"  # device time: the loop stops after its first batch (each ticket spends more)
# The first batch is two tickets on two cores (--concurrency auto), each with a replicate when it
# wins, and every gate answer waits twice its measured verdict time: about 8 minutes at load 8.
RUN_TIMEOUT_S = 1200


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import subprocess
    import sys

    from tests.conftest import REPO

    home = tmp_path_factory.mktemp("e2e") / "home"
    env = {k: v for k, v in os.environ.items() if k != "SEGFACTORY_NO_USER_SEPARATION"}

    def cli(*args: str) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "segfactory", *args, "--home", str(home)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=REPO,
            env=env,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    init = cli("init", "--profile", "demo")
    assert init.returncode == 0, init.stderr
    run = cli("run", "--profile", "demo", "--budget", RUN_BUDGET, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    return {"home": home, "cli": cli, "summary": json.loads(run.stdout), "stderr": run.stderr}


def _tickets(run: dict[str, Any]) -> list[str]:
    """The run's tickets as the host recorded them: its first batch (``--concurrency auto``: as many
    as this machine's cores, one thread each, so two on two cores), and the replicate of each that
    confirm-a answered WIN (a replicate owed to a WIN runs even past the device budget)."""
    run_dir = run["home"] / "runs" / run["summary"]["run_id"]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["concurrency_requested"] == "auto" and record["concurrency_plan"]["basis"]
    tickets = [
        json.loads(line)["id"] for line in (run_dir / "people" / "tickets.jsonl").read_text().splitlines()
    ]
    batch = [t for t in tickets if not t.endswith("-rep")]
    assert batch[0] == f"{run['summary']['run_id']}-t001", tickets
    assert len(batch) <= record["concurrency"], (tickets, record["concurrency"])
    assert {t for t in tickets if t.endswith("-rep")} <= {f"{t}-rep" for t in batch}, tickets
    return tickets


def test_the_run_shows_progress_and_writes_the_report(finished_run: dict[str, Any]) -> None:
    summary, home = finished_run["summary"], finished_run["home"]
    assert "sandbox verify (bwrap): ok" in finished_run["stderr"]
    assert "analysing the current best" in finished_run["stderr"]
    # the first batch, and the replicate of each WIN on confirm-a (owed past the budget)
    assert summary["tickets_run"] == len(_tickets(finished_run))
    assert summary["stop_reason"].startswith("budget: device time")
    people = home / "runs" / summary["run_id"] / "people"
    md = (people / "report.md").read_text()
    for section in (
        "## Outcome",
        "## Rounds: weakness, fix tried, result",
        "## Scored predictions",
        "## Every ticket",
        "## Milestone",
        "## Audit",
        "## LLM usage",
        "## What this run did not do",
        "No LLM was configured",
    ):
        assert section in md
    assert (people / "report.html").is_file() and (people / "plots").is_dir()
    report = json.loads((people / "report.json").read_text())
    assert [t["ticket_id"] for t in report["tickets"]] == _tickets(finished_run) and report["audit"][
        "ok"
    ] is True
    assert [r["round"] for r in report["rounds"]] == [1] and report["rounds"][0]["tried"][0]["ticket_id"]
    assert set(summary["hit_rate"]) >= {"recommendation", "default", "sealed"}
    assert "sealed" in report["milestone"]["tiers"] and "never-queried" in report["milestone"]["tiers"]


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="user separation needs root")
def test_started_as_root_the_run_continues_as_segfactory(finished_run: dict[str, Any]) -> None:
    import pwd

    from gate import users

    home, stderr, run_id = finished_run["home"], finished_run["stderr"], finished_run["summary"]["run_id"]
    assert users.vault_is_separated(home / "vault")
    assert "sandbox verify (bwrap): ok," in stderr  # root's verify, with its canary in the vault
    assert "continuing as segfactory after set-up" in stderr
    assert "as root before continuing as this user" in stderr  # the re-started command did not verify again
    record = json.loads((home / "runs" / run_id / "run.json").read_text())
    assert record["user"] == users.ORCHESTRATOR_USER
    uid = pwd.getpwnam(users.ORCHESTRATOR_USER).pw_uid
    written = [p for p in (home / "runs" / run_id).rglob("*") if p.is_file()]
    assert written and {p.stat().st_uid for p in written} == {uid}  # every record the loop wrote is its own
    assert (home / "vault").stat().st_uid == pwd.getpwnam(users.GATE_USER).pw_uid


def test_the_audit_verifies_with_no_unanchored_window(finished_run: dict[str, Any]) -> None:
    result = finished_run["cli"]("audit", "verify", "--json")
    assert result.returncode == 0, result.stderr
    verified = json.loads(result.stdout)
    assert verified["ok"] is True and verified["unanchored_from"] is None


def test_the_ledger_holds_queries_only_for_dev_wins(finished_run: dict[str, Any], tmp_path: Path) -> None:
    home, run_id = finished_run["home"], finished_run["summary"]["run_id"]
    rows = [
        json.loads(line)
        for line in (home / "runs" / run_id / "people" / "dev_comparisons.jsonl").read_text().splitlines()
    ]
    wins = {r["ticket_id"] for r in rows if r["dev_win"]}
    copy = tmp_path / "ledger"  # a copy: sqlite would leave root-owned -shm/-wal files in the gate's vault
    copy.mkdir()
    for part in (home / "vault").glob("ledger.sqlite*"):
        shutil.copy2(part, copy / part.name)
    with sqlite3.connect(copy / "ledger.sqlite") as db:
        queried = {r[0] for r in db.execute("SELECT ticket_id FROM queries WHERE run_id = ?", (run_id,))}
    assert queried <= wins | {f"{w}-rep" for w in wins}
    # each ticket that trained to its end compared on dev by the host, once (tickets trained together
    # are compared as each ends; one killed past its budget on a loaded machine has nothing to compare)
    tickets = home / "runs" / run_id / "tickets"
    trained = [t for t in _tickets(finished_run) if _status(tickets / t / "outcome.json") == "DONE"]
    assert sorted(r["ticket_id"] for r in rows) == sorted(trained)


def _status(outcome: Path) -> str:
    return str(json.loads(outcome.read_text())["status"])


def test_resume_of_a_finished_run_is_a_no_op(finished_run: dict[str, Any]) -> None:
    home, run_id = finished_run["home"], finished_run["summary"]["run_id"]
    log = home / "audit" / "log.jsonl"
    before = log.read_bytes()
    result = finished_run["cli"]("run", "--resume", run_id, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["already_finished"] is True and summary["tickets_run"] == len(_tickets(finished_run))
    assert log.read_bytes() == before


def test_promotion_without_the_gates_wins_is_refused_by_the_gate(finished_run: dict[str, Any]) -> None:
    """The host cannot move the best on its own: the gate checks its ledger for both WINs."""
    from agents.run_setup import RunSetup
    from agents.services import HostServices
    from audit import AuditLog
    from audit.anchor import gate_anchor_store
    from segfactory.errors import GateError
    from segfactory.home import Home
    from segfactory.layout import PROMOTIONS

    home, run_id = Home(finished_run["home"]), finished_run["summary"]["run_id"]
    trained = sorted((home.runs / run_id / "tickets").glob("*/model.onnx"))
    if not trained:
        pytest.skip("the run's only ticket produced no model (it failed); nothing to promote")
    ticket_id = trained[0].parent.name
    with gate_anchor_store(home) as anchor, AuditLog(home, anchor) as log:
        promotions = home.runs / PROMOTIONS
        before = promotions.read_text() if promotions.exists() else ""
        setup = RunSetup(
            home=home,
            run_id=run_id,
            backend="bwrap",
            dataset=None,
            base_config=Path("."),
            gate=anchor.client,
            audit=log,
            dev_margin=0.005,
        )
        services = HostServices(setup)
        best_before = anchor.client.status().current_best
        if ticket_id in before:  # the run promoted it: promoting again moves nothing, writes nothing
            services.promote(ticket_id)
            assert (promotions.read_text() if promotions.exists() else "") == before
        else:
            with pytest.raises(GateError, match="promotion refused"):
                services.promote(ticket_id)
        assert anchor.client.status().current_best == best_before
        log.close_run(run_id)
