"""The code-editing arm: a code draft's files are what the agent wrote, in a copy, never the source.

The proposer and the code-editing agent are the real LLM proposer and agent loop, each on the
real OpenAI SDK, against the fake OpenAI server on loopback (one script, answered in order).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agents.code_agent import sandbox_runner
from agents.code_arm import CodeArm, CodeArmFailed, CodeArmProposer, _fresh, changed_files, draft_key
from agents.context import ProposerContext
from agents.llm import LLMCaller, LLMUsage, make_provider
from agents.proposer import TicketDraft, get_proposer, propose_valid
from agents.validate import ticket_problems
from agents.workspace import Workspace
from runner._workspace import materialise
from segfactory.budgets import load_budget_policy
from segfactory.home import SOURCE_ROOT
from segfactory.records import Actor, Arm, Budget, Ticket
from tests.agents.conftest import Log
from tests.agents.fakes import Step, openai_server

TARGET = "code/vision/worker.py"
MARK = "\n# the code-editing agent was here\n"
CODE_DRAFT = {
    "kind": "code",
    "hypothesis": "a marked worker trains exactly as before",
    "change": {"files": [TARGET]},
    "budget": {"device_seconds": 60, "epochs": 2},
    "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.01},
}
CONFIG_DRAFT = {
    "kind": "config",
    "hypothesis": "a lower learning rate",
    "change": {"optim.lr": 0.001},
    "budget": {"device_seconds": 60, "epochs": 2},
    "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.01},
}


def _agent_steps(content: str) -> list[Step]:
    return [
        Step.call("read_file", {"path": TARGET}),
        Step.call("write_file", {"path": TARGET, "content": content}),
        Step.call("submit", {"summary": "marked the worker"}),
    ]


def _proposer(base_url: str, log: Log, root: Path) -> CodeArmProposer:
    usage = LLMUsage()
    inner = get_proposer(
        "openai:gpt-4o",
        sink=log,
        usage=usage,
        base_url=base_url,
        run_id="r1",
        timeout_s=10,
        default_budget=Budget(device_seconds=60, epochs=2),
        caps=Budget(device_seconds=120, epochs=10),
        backoff_base_s=0.01,
    )
    caller = LLMCaller(
        make_provider("openai:gpt-4o", log, Actor.CODE_AGENT, base_url=base_url, run_id="r1", timeout_s=10),
        log,
        usage,
        Actor.CODE_AGENT,
        run_id="r1",
        backoff_base_s=0.01,
    )

    def no_sandbox(command: list[str], workspace: Path, timeout_s: float) -> None:
        raise AssertionError("these scripts never call the run tool")

    return CodeArmProposer(
        inner,
        CodeArm(
            caller,
            no_sandbox,
            log,
            root=root,
            run_id="r1",  # type: ignore[arg-type]
            home=log.home.root,
        ),
    )


def _valid(proposer: CodeArmProposer, context: ProposerContext, log: Log, n: int = 1) -> list[Ticket]:
    policy, ids, seeds = load_budget_policy(), itertools.count(1), itertools.count(7)
    return propose_valid(
        proposer,
        context,
        n,
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_id=lambda: f"r1-t{next(ids):03d}",
        make_seed=lambda: next(seeds),
        sink=log,
        run_id="r1",
    )


def test_a_code_draft_carries_the_files_the_agent_wrote(
    keys: None, audit_log: Log, context: ProposerContext, tmp_path: Path
) -> None:
    source = (SOURCE_ROOT / "vision" / "worker.py").read_text()
    root = tmp_path / "home" / "runs" / "r1" / "code-agent"
    script = [Step.call("propose_tickets", {"tickets": [CODE_DRAFT]}), *_agent_steps(source + MARK)]
    with openai_server(script) as fake:
        [ticket] = _valid(_proposer(fake.base_url, audit_log, root), context, audit_log)
    assert ticket.arm is Arm.AGENT_CODE and ticket.change["files"] == {TARGET: source + MARK}
    assert (SOURCE_ROOT / "vision" / "worker.py").read_text() == source  # the source tree was never touched
    key = draft_key(TicketDraft.model_validate(CODE_DRAFT))
    # the agent's own copy, and whatever its run tool left there, is removed once its files are on record
    assert json.loads((root / key / "result.json").read_text())["files"] == {TARGET: source + MARK}
    assert not (root / key / "work").exists()
    assert audit_log.events("workspace_removed") == [{"draft": key, "complete": True}]
    assert b"a marked worker trains exactly as before" in fake.received[1]  # the task is the draft
    [result] = [m for m in json.loads(fake.received[2])["messages"] if m["role"] == "tool"]
    assert json.loads(result["content"])["content"] == source  # read_file sent back the copy of the real file
    calls = [r for r in audit_log.records() if r.event == "tool_call"]
    assert [(r.actor, r.payload["tool"], r.payload["ok"]) for r in calls] == [
        ("code-agent", "read_file", True),
        ("code-agent", "write_file", True),
        ("code-agent", "submit", True),
    ]
    assert {r.actor for r in audit_log.records() if r.event == "llm_attempt"} == {"proposer", "code-agent"}
    assert len(audit_log.events("llm_http_request")) == len(fake.received) == 4  # every exchange on record
    [files] = audit_log.events("code_agent_files")
    assert list(files["files"]) == [TARGET]
    work = tmp_path / "ticket-work"  # the runner lays the files over its code copy where Python imports them
    materialise(work, ticket, {"epochs": 1})
    assert (work / "code" / "vision" / "worker.py").read_text() == source + MARK
    assert not (work / "code" / "code").exists()


def test_the_same_draft_again_reuses_the_agents_result_without_asking(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    source = (SOURCE_ROOT / "vision" / "worker.py").read_text()
    draft = TicketDraft.model_validate(CODE_DRAFT)
    with openai_server(_agent_steps(source + MARK)) as fake:
        arm = _proposer(fake.base_url, audit_log, tmp_path / "arm").arm
        first = arm.write(draft)
        again = arm.write(draft)  # a resumed run, asked the same draft
    assert first == again and len(fake.received) == 3
    assert audit_log.events("code_agent_reused") == [{"draft": draft_key(draft), "failed": False}]


def test_an_agent_that_changes_nothing_drops_the_draft_and_the_proposer_hears_why(
    keys: None, audit_log: Log, context: ProposerContext, tmp_path: Path
) -> None:
    script = [
        Step.call("propose_tickets", {"tickets": [CODE_DRAFT]}),
        Step.call("submit", {"summary": "done"}),
        Step.call("propose_tickets", {"tickets": [CONFIG_DRAFT]}),
    ]
    with openai_server(script) as fake:
        proposer = _proposer(fake.base_url, audit_log, tmp_path / "arm")
        assert (
            _valid(proposer, context, audit_log) == []
        )  # nothing to train: no ticket, not the unchanged code
        [ticket] = _valid(proposer, context, audit_log)
    assert ticket.kind.value == "config"
    [failed] = audit_log.events("code_agent_failed")
    assert "submitted without changing any file" in failed["reason"]
    prompt = json.loads(fake.received[2])["messages"][-1]["content"]
    assert "the code-editing agent: the code agent submitted without changing any file" in prompt


def test_a_symlink_or_a_deleted_file_is_no_code_change(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _fresh(work)
    workspace = Workspace(work)
    with pytest.raises(CodeArmFailed, match="submitted without changing any file"):
        changed_files(workspace)
    (work / "code" / "vision" / "escape").symlink_to("/etc")
    with pytest.raises(CodeArmFailed, match="left a symlink at code/vision/escape"):
        changed_files(workspace)
    (work / "code" / "vision" / "escape").unlink()
    (work / "code" / "vision" / "worker.py").unlink()
    with pytest.raises(CodeArmFailed, match="deleted code/vision/worker.py"):
        changed_files(workspace)


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_agents_run_tool_works_on_its_copy_in_the_real_sandbox(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    source = (SOURCE_ROOT / "vision" / "worker.py").read_text()
    probe = [
        "python",
        "-c",
        "import sys; sys.path.insert(0, 'code'); import vision.worker as w; print(w.__file__)",
    ]
    script = [
        Step.call("write_file", {"path": TARGET, "content": source + MARK}),
        Step.call("run", {"command": probe, "timeout_s": 120}),
        Step.call("submit", {"summary": "checked"}),
    ]
    with openai_server(script) as fake:
        base = _proposer(fake.base_url, audit_log, tmp_path / "arm").arm
        arm = CodeArm(
            base.caller,
            sandbox_runner("bwrap"),
            audit_log,
            root=tmp_path / "arm",
            run_id="r1",
            home=audit_log.home.root,
        )
        written = arm.write(TicketDraft.model_validate(CODE_DRAFT))
    assert written.change["files"] == {TARGET: source + MARK}
    [executed] = audit_log.events("sandbox_exec")
    assert executed["exit_code"] == 0, audit_log.events("tool_call")[1]
    [result] = [m for m in json.loads(fake.received[2])["messages"] if m["role"] == "tool"][-1:]
    assert (
        "/work/code/vision/worker.py" in json.loads(result["content"])["stdout"]
    )  # the copy, not the source


def test_a_proposers_own_draft_is_the_agents_start_and_a_bad_one_is_refused(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    source = (SOURCE_ROOT / "vision" / "worker.py").read_text()
    drafted = TicketDraft.model_validate({**CODE_DRAFT, "change": {"files": {TARGET: source + MARK}}})
    outside = TicketDraft.model_validate(
        {**CODE_DRAFT, "change": {"files": {"config.yaml": "epochs: 999\n"}}}
    )
    with openai_server([Step.call("submit", {"summary": "the proposer's draft is right"})]) as fake:
        arm = _proposer(fake.base_url, audit_log, tmp_path / "arm").arm
        assert arm.write(drafted).change["files"] == {TARGET: source + MARK}
        with pytest.raises(
            CodeArmFailed, match="draft of 'config.yaml' cannot be written: 'config.yaml': only files"
        ):
            arm.write(outside)
    assert len(fake.received) == 1  # the refused draft never reached the agent


@pytest.mark.timeout(120)
def test_a_tree_too_deep_to_read_back_fails_its_draft_not_the_run(
    keys: None, audit_log: Log, context: ProposerContext, tmp_path: Path
) -> None:
    """The proposer's own draft plants more nested folders than the interpreter's recursion limit
    (the agent's `run` could as well): the read-back refuses the tree, the draft is dropped on
    record, and the other draft goes on."""
    levels = sys.getrecursionlimit() + 100
    deep = {**CODE_DRAFT, "change": {"files": {"code/vision/" + "d/" * levels + "x.py": "X = 1\n"}}}
    script = [
        Step.call("propose_tickets", {"tickets": [deep, CONFIG_DRAFT]}),
        Step.call("submit", {"summary": "a deep module"}),
    ]
    try:
        with openai_server(script) as fake:
            [ticket] = _valid(_proposer(fake.base_url, audit_log, tmp_path / "arm"), context, audit_log, n=2)
    finally:  # rm walks any depth; shutil.rmtree (pytest's own clean-up) recurses and fails on it
        for work in (tmp_path / "arm").glob("*/work"):
            subprocess.run(["rm", "-rf", str(work)], check=True)
    assert ticket.kind.value == "config"  # the run goes on with the other draft
    [failed] = audit_log.events("code_agent_failed")
    assert "more than MAX_WALK_DEPTH=32 folders" in failed["reason"]
    key = draft_key(TicketDraft.model_validate(deep))
    recorded = json.loads((tmp_path / "arm" / key / "result.json").read_text())
    assert "MAX_WALK_DEPTH" in recorded["error"] and recorded["files"] == {}  # a recorded state
