"""The code-editing agent, scripted through the fake vendors, attacks its workspace.

It tries a protected path (the home's vault) and a symlink escape (a link it plants with the
``run`` tool, inside a real bwrap sandbox when available). Both are refused with a corrective
tool message, recorded as their own audit events, and reported by ``audit check``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.code_agent import CodeAgent, CodeTools, CommandResult, CommandRunner, sandbox_runner
from agents.llm import LLMCaller, LLMUsage, make_provider
from agents.workspace import Workspace
from audit import check_records, load_policy
from segfactory.records import Actor
from tests.agents.conftest import Log
from tests.agents.fakes import Step, anthropic_server, openai_server

PROVIDERS = {
    "openai": ("openai:gpt-4o", openai_server),
    "anthropic": ("anthropic:claude-sonnet-4-6", anthropic_server),
}


def _runner() -> CommandRunner:
    """The real bwrap sandbox when it can start; otherwise a stub that plants the same symlink."""
    if shutil.which("bwrap"):
        return sandbox_runner("bwrap")

    def plant(command: list[str], workspace: Path, timeout_s: float) -> CommandResult:  # test stub only
        assert command[:2] == ["ln", "-s"]
        (workspace / command[3]).symlink_to(command[2])
        return CommandResult(exit_code=0, stdout="", stderr="")

    return plant


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "runs" / "r1" / "tickets" / "t1"
    (root / "code").mkdir(parents=True)
    (root / "code" / "model.py").write_text("WIDTH = 16\n")
    return root


@pytest.mark.bwrap
@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_protected_path_and_symlink_escape_are_refused_and_flagged(
    flavour: str, keys: None, audit_log: Log, tmp_path: Path
) -> None:
    home = audit_log.home.root
    vault_file = f"{home}/vault/confirm-a/v1/masks.npy"
    script = [
        Step.call("list_files", {"path": "code"}),
        Step.call("read_file", {"path": vault_file}),
        Step.call("run", {"command": ["ln", "-s", "/etc", "code/etc"], "timeout_s": 30}),
        Step.call("read_file", {"path": "code/etc/passwd"}),
        Step.call("write_file", {"path": "code/model.py", "content": "WIDTH = 32\n"}),
        Step.call("submit", {"summary": "wider decoder"}),
    ]
    name, server = PROVIDERS[flavour]
    root = _workspace(tmp_path)
    with server(script) as fake:
        caller = LLMCaller(
            make_provider(name, audit_log, Actor.CODE_AGENT, base_url=fake.base_url, timeout_s=10),
            audit_log,
            LLMUsage(),
            Actor.CODE_AGENT,
        )
        tools = CodeTools(Workspace(root, home=home), _runner(), audit_log, run_id="r1", ticket_id="t1")
        outcome = CodeAgent(caller, tools).run("Widen the decoder.")
    results = [(c["tool"], c["ok"], c["result"][:200]) for c in audit_log.events("tool_call")]
    assert outcome.submitted and outcome.stopped_by == "submit" and outcome.steps == 6, (outcome, results)
    assert (root / "code" / "model.py").read_text() == "WIDTH = 32\n"
    assert (root / "code" / "etc").is_symlink()  # planted, but never followed
    assert [e["path"] for e in audit_log.events("protected_read_attempt")] == [vault_file]
    assert [e["path"] for e in audit_log.events("path_escape_attempt")] == ["code/etc/passwd"]
    assert b"refused" in fake.received[2] and b"refused" in fake.received[4]  # corrective tool messages
    assert b"root:x:0:0" not in b"".join(fake.received)
    tool_calls = audit_log.events("tool_call")
    assert [c["tool"] for c in tool_calls] == [
        "list_files",
        "read_file",
        "run",
        "read_file",
        "write_file",
        "submit",
    ]
    findings = check_records(audit_log.records(), load_policy(), home)
    flagged = {(f.event, f.path) for f in findings if f.kind == "event"}
    assert flagged == {("protected_read_attempt", vault_file), ("path_escape_attempt", "code/etc/passwd")}


def test_tool_misuse_gets_corrective_messages_and_the_step_cap_holds(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    script = [
        Step.call("rm_rf", {}),
        Step("bad_json_args", tool="read_file", text="{path:"),
        Step.call("write_file", {"path": "config.yaml", "content": "x"}),
        Step("text", text="thinking"),
        Step("text", text="still thinking"),
    ]
    with openai_server(script) as fake:
        caller = LLMCaller(
            make_provider("openai:gpt-4o", audit_log, Actor.CODE_AGENT, base_url=fake.base_url, timeout_s=10),
            audit_log,
            LLMUsage(),
            Actor.CODE_AGENT,
        )
        tools = CodeTools(Workspace(_workspace(tmp_path)), _runner(), audit_log)
        outcome = CodeAgent(caller, tools, max_steps=5).run("task")
    assert (outcome.submitted, outcome.stopped_by, outcome.steps) == (False, "step_cap", 5)
    results = [json.loads(body)["messages"][-1]["content"] for body in fake.received[1:]]
    assert "unknown tool 'rm_rf'" in results[0] and "not valid JSON" in results[1]
    assert "only files under code/" in results[2] and "Call exactly one of the tools" in results[3]
    assert [c["ok"] for c in audit_log.events("tool_call")] == [False, False, False]
    assert audit_log.events("code_agent_end")[0]["stopped_by"] == "step_cap"


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.timeout(120)  # before the fix, read_file on the FIFO never returned
def test_a_fifo_the_agent_makes_gets_a_corrective_message_not_a_hang(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    script = [
        Step.call("run", {"command": ["mkfifo", "code/model.py.new"], "timeout_s": 30}),
        Step.call("read_file", {"path": "code/model.py.new"}),
        Step.call("write_file", {"path": "code/model.py.new", "content": "WIDTH = 32\n"}),
        Step.call("submit", {"summary": "tried a FIFO"}),
    ]
    root = _workspace(tmp_path)
    with openai_server(script) as fake:
        caller = LLMCaller(
            make_provider("openai:gpt-4o", audit_log, Actor.CODE_AGENT, base_url=fake.base_url, timeout_s=10),
            audit_log,
            LLMUsage(),
            Actor.CODE_AGENT,
        )
        tools = CodeTools(Workspace(root), sandbox_runner("bwrap"), audit_log, run_id="r1", ticket_id="t1")
        outcome = CodeAgent(caller, tools).run("Widen the decoder.")
    calls = [(c["tool"], c["ok"]) for c in audit_log.events("tool_call")]
    assert outcome.submitted and calls == [
        ("run", True),
        ("read_file", False),
        ("write_file", False),
        ("submit", True),
    ]
    for body in fake.received[2:4]:  # the model got a corrective tool message for each, and went on
        message = json.loads(body)["messages"][-1]["content"]
        assert "'code/model.py.new' is a FIFO, not a regular file" in message
