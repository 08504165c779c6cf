"""``segfactory run --proposer openai:M --code-agent``: a code ticket whose files the agent wrote trains.

One demo home and one real ``segfactory run`` process. The proposer and the code-editing agent
are the real OpenAI SDK talking to the fake OpenAI server on loopback (``OPENAI_BASE_URL``): the
proposer asks for a code ticket naming ``code/vision/worker.py``, the agent reads that file from
its copy of the training code, writes it back with a mark (a line it prints to stderr when it
loads), and submits. The ticket then trains in the real bwrap sandbox, and the mark in the
sandbox's stderr shows that the code which ran is the code the agent wrote; the ticket is
recorded. The demo's 10 s device budget ends the run after that ticket.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from segfactory.home import SOURCE_ROOT
from tests.conftest import REPO
from tests.e2e._killrun import audit_records, events

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

TARGET = "code/vision/worker.py"
MARK = "code-agent-mark: this worker was written by the code-editing agent"
# Written when the module loads: the worker leaves with os._exit, which runs no atexit hook.
HOOK = f"\nimport sys\n\nsys.stderr.write({MARK!r} + '\\n')\n"
FAKE_LIFETIME_S = 1500.0  # the fake outlives init and the run
RUN_TIMEOUT_S = 1200.0
DRAFT = {
    "kind": "code",
    "hypothesis": "a worker that announces itself trains exactly as the base does",
    "change": {"files": [TARGET]},
    "budget": {"device_seconds": 120, "epochs": 1},  # what it learns is not under test
    "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.05},
}


def _marked(source: str) -> str:
    head = "from __future__ import annotations\n"
    assert head in source
    return source.replace(head, head + HOOK, 1)


def _cli(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "segfactory", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )


@pytest.fixture(scope="module")
def code_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from tests.agents.fakes import Step, _server, openai_server

    home = tmp_path_factory.mktemp("code-arm") / "home"
    env = {**os.environ, "SEGFACTORY_NO_USER_SEPARATION": "1", "OPENAI_API_KEY": "sk-test-not-a-secret"}
    init = _cli(["init", "--profile", "demo", "--home", str(home)], env, 900)
    assert init.returncode == 0, init.stderr[-3000:]
    source = (SOURCE_ROOT / "vision" / "worker.py").read_text()
    script = [
        Step.call("propose_tickets", {"tickets": [DRAFT]}),
        Step.call("read_file", {"path": TARGET}),
        Step.call("write_file", {"path": TARGET, "content": _marked(source)}),
        Step.call("submit", {"summary": "a line the worker prints to stderr when it loads"}),
    ]
    lifetime, _server.LIFETIME_S = _server.LIFETIME_S, FAKE_LIFETIME_S
    try:
        with openai_server(script) as fake:
            proc = _cli(
                [
                    "run",
                    "--profile",
                    "demo",
                    "--budget",
                    "10s",
                    "--proposer",
                    "openai:gpt-4o-mini",
                    "--code-agent",
                    "--judge",
                    "rules",
                    "--concurrency",
                    "1",  # the scripted code ticket alone (auto would train two at once here)
                    "--home",
                    str(home),
                    "--json",
                ],
                {**env, "OPENAI_BASE_URL": fake.base_url},
                RUN_TIMEOUT_S,
            )
            received = list(fake.received)
    finally:
        _server.LIFETIME_S = lifetime
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    yield {
        "home": home,
        "summary": summary,
        "run_id": summary["run_id"],
        "source": source,
        "received": received,
        "records": audit_records(home),
        "stderr": proc.stderr,
    }


def _code_ticket(run: dict[str, Any]) -> dict[str, Any]:
    people = run["home"] / "runs" / run["run_id"] / "people"
    tickets = [json.loads(line) for line in (people / "tickets.jsonl").read_text().splitlines()]
    code = [t for t in tickets if t["kind"] == "code"]
    assert code, [t["kind"] for t in tickets]
    return code[0]


def test_the_code_ticket_carries_the_files_the_agent_wrote(code_run: dict[str, Any]) -> None:
    ticket = _code_ticket(code_run)
    assert ticket["arm"] == "agent-code"
    assert ticket["change"]["files"] == {TARGET: _marked(code_run["source"])}
    assert (SOURCE_ROOT / "vision" / "worker.py").read_text() == code_run["source"]  # never the source tree
    record = json.loads((code_run["home"] / "runs" / code_run["run_id"] / "run.json").read_text())
    assert (record["code_agent"], record["judge"]) == (True, "rules")
    assert len(code_run["received"]) == 4  # one proposal, three agent steps; nothing asked twice


def test_every_agent_exchange_and_tool_call_is_on_record(code_run: dict[str, Any]) -> None:
    records, run_id = code_run["records"], code_run["run_id"]
    calls = [r for r in events(records, "tool_call", run_id) if r["actor"] == "code-agent"]
    assert [c["payload"]["tool"] for c in calls] == ["read_file", "write_file", "submit"]
    assert all(c["run_id"] == run_id for c in calls)
    attempts = [r["actor"] for r in events(records, "llm_attempt", run_id)]
    assert attempts.count("proposer") == 1 and attempts.count("code-agent") == 3
    assert len(events(records, "llm_http_request", run_id)) == len(code_run["received"])
    [files] = events(records, "code_agent_files", run_id)
    assert list(files["payload"]["files"]) == [TARGET]


def test_the_agents_code_is_what_trained_in_the_sandbox_and_the_ticket_is_recorded(
    code_run: dict[str, Any],
) -> None:
    home, run_id, ticket = code_run["home"], code_run["run_id"], _code_ticket(code_run)
    # the code the host gave the sandbox (the lineage row; the workspace is removed once the
    # ticket is done and copied out), and the attempt's own stderr shows that code ran
    rows = [json.loads(line) for line in (home / "runs" / run_id / "lineage.jsonl").read_text().splitlines()]
    code = next(r["code"] for r in rows if r["ticket_id"] == ticket["id"])
    assert code["vision/worker.py"] == _marked(code_run["source"])
    assert not (home / "runs" / run_id / "tickets" / ticket["id"] / "work").exists()
    attempts = events(code_run["records"], "ticket_attempt", run_id, ticket["id"])
    assert attempts and MARK in attempts[0]["payload"]["stderr_tail"], attempts[-1]["payload"]
    assert attempts[-1]["payload"]["exit_code"] == 0
    recorded = events(code_run["records"], "ticket_recorded", run_id, ticket["id"])
    assert len(recorded) == 1 and recorded[0]["payload"]["verdict"] != "FAILED"
    assert (home / "runs" / run_id / "tickets" / ticket["id"] / "outcome.json").is_file()
