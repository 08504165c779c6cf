"""What a model or a sandbox wrote reaches an operator's terminal as text, never as escapes.

Each command runs on a real pseudo-terminal: click strips ANSI codes only when its output is not
a terminal, so a test that pipes the output would pass on a command that prints them raw. The
slow case runs ``segfactory run`` with an LLM proposer (the fake OpenAI server on loopback, the
real SDK) whose hypothesis colours the terminal and sets its title, then ``segfactory report``.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents import report as rpt
from agents.state import FactoryState
from segfactory.home import Home
from tests.conftest import REPO

HOSTILE = "\x1b[31mRED\x1b]0;pwned\x07 lower lr\rFORGED \u202eevil"
SHOWN = "\\x1b[31mRED\\x1b]0;pwned\\x07 lower lr\\x0dFORGED \\u202eevil"
ESCAPES = (b"\x1b[31m", b"\x1b]0;", b"\x07", b"lr\rFORGED", "\u202e".encode())  # a pty adds \r before \n
QUIET_S = 3.0  # after the command exits: how long the terminal may stay silent before reading stops


def on_a_terminal(
    args: list[str], env: dict[str, str] | None = None, timeout_s: float = 120
) -> tuple[int, bytes]:
    """Run ``segfactory ARGS`` with stdin, stdout and stderr on one pseudo-terminal; (exit code, bytes)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "segfactory", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline, quiet_since = time.monotonic() + timeout_s, None
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
                quiet_since = None
            elif proc.poll() is not None:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > QUIET_S:
                    break
        else:
            proc.kill()
            raise AssertionError(
                f"segfactory {args[0]} did not finish in {timeout_s} s: {b''.join(chunks)[-2000:]!r}"
            )
    finally:
        os.close(master)
    return proc.wait(timeout=30), b"".join(chunks)


def _hostile_report(home: Home, run_id: str) -> Path:
    """A run report whose ticket a model wrote: its hypothesis, change and failure reason."""
    row = rpt.TicketRow(
        ticket_id=f"{run_id}-t001",
        arm="agent",
        kind="config",
        hypothesis=HOSTILE,
        change={"optim.lr": HOSTILE},
        status="FAILED",
        reason=f"the worker exited with status 3: {HOSTILE}",
        verdict="FAILED",
    )
    report = rpt.RunReport(
        run_id=run_id,
        profile="demo",
        proposer="openai:gpt-4o",
        backend="bwrap",
        stop_reason=f"proposer failed: {HOSTILE}",
        started_at=1.0,
        ended_at=2.0,
        win_rule_sha256=None,
        tickets=[row],
        not_run=[{"id": f"{run_id}-t002", "hypothesis": HOSTILE}],
        approvals=[],
        counts=rpt.counts([row], FactoryState(run_id=run_id)),
        device_seconds=1.0,
        milestone=None,
        audit=None,
        llm_usage={},
        analysis_dir=None,
    )
    people = home.people_dir(run_id)
    people.mkdir(parents=True)
    return rpt.write(report, people)["md"]


def test_the_report_stores_and_prints_a_models_escapes_as_text(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    md = _hostile_report(home, "r1")
    html = (md.parent / rpt.REPORT_HTML).read_text()
    assert not any(e.decode() in md.read_text() + html for e in ESCAPES)
    assert SHOWN in html  # the Markdown escapes its backslashes; rendered, the text reads as shown
    queued = next(line for line in md.read_text().splitlines() if line.startswith("- r1-t002: "))
    code, shown = on_a_terminal(["report", "r1", "--home", str(home.root)])
    assert code == 0 and queued.encode() in shown, shown[-2000:]  # the stored, inert Markdown
    assert not any(e in shown for e in ESCAPES), shown[-2000:]


def test_a_report_written_raw_before_is_printed_inert_on_a_terminal(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    md = _hostile_report(home, "r1")
    md.write_text(f"# Run r1\n\n- r1-t001: {HOSTILE}\n")  # as a report from an older version stored it
    code, shown = on_a_terminal(["report", "r1", "--home", str(home.root)])
    assert code == 0 and SHOWN.encode() in shown and b"# Run r1" in shown
    assert not any(e in shown for e in ESCAPES), shown[-2000:]


FAKE_LIFETIME_S = 1500.0  # the fake outlives init and the run
DRAFT = {
    "kind": "config",
    "hypothesis": HOSTILE,
    "change": {"optim.lr": 0.0005},
    "budget": {"device_seconds": 60, "epochs": 1},  # what it learns is not under test
    "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.05},
}


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_runs_progress_and_its_report_show_a_models_escapes_as_text(tmp_path: Path) -> None:
    from tests.agents.fakes import Step, _server, openai_server

    home = tmp_path / "home"
    env = {**os.environ, "SEGFACTORY_NO_USER_SEPARATION": "1", "OPENAI_API_KEY": "sk-test-not-a-secret"}
    code, shown = on_a_terminal(["init", "--profile", "demo", "--home", str(home)], env, 900)
    assert code == 0, shown[-3000:]
    lifetime, _server.LIFETIME_S = _server.LIFETIME_S, FAKE_LIFETIME_S
    try:  # one proposal; the next request is unscripted, so the proposer fails and the run ends
        with openai_server([Step.call("propose_tickets", {"tickets": [DRAFT]})]) as fake:
            args = ["run", "--profile", "demo", "--budget", "10s", "--proposer", "openai:gpt-4o-mini"]
            code, shown = on_a_terminal(
                [*args, "--judge", "rules", "--home", str(home)],
                {**env, "OPENAI_BASE_URL": fake.base_url},
                1200,
            )
    finally:
        _server.LIFETIME_S = lifetime
    assert code == 0, shown[-4000:]
    started = [line for line in shown.splitlines() if b"(config): " in line and b"RED" in line]
    assert started and SHOWN[:60].encode() in started[0], shown[-4000:]  # the progress line, inert
    assert not any(e in shown for e in ESCAPES), shown[-4000:]
    run_id = json.loads((home / "runs").joinpath(_only_run(home), "run.json").read_text())["run_id"]
    people = Home(home).people_dir(run_id)
    assert SHOWN in (people / rpt.REPORT_HTML).read_text()  # rendered, the text reads as shown
    stored = (people / rpt.REPORT_MD).read_text()
    [line] = [line for line in stored.splitlines() if line.startswith("- **") and "RED" in line]
    code, shown = on_a_terminal(["report", run_id, "--home", str(home)], env)
    assert code == 0 and line.encode() in shown and not any(e in shown for e in ESCAPES), shown[-3000:]


def _only_run(home: Path) -> str:
    [run] = [p.name for p in (home / "runs").iterdir() if (p / "run.json").is_file()]
    return run
