"""The code-editing arm: a code ticket's files, written by the code-editing agent when it is proposed.

With ``segfactory run --code-agent``, a code draft from the proposer says what to try (its
hypothesis) and names the files it means to change (``change["files"]``: paths under ``code/``).
:class:`CodeArmProposer` hands each such draft to :class:`CodeArm` before validation: the
code-editing agent (``agents.code_agent``) gets a fresh copy of the training code in
``runs/<run>/code-agent/<draft>/work/``, never the source tree, and a task built from the draft.
When it submits, the host reads back every file that differs from the source tree (beneath the
root, no symlink followed), and the draft goes on with ``change["files"]`` as path -> text:
through the run's validation (budgets, code paths, the parent fingerprint, which now sees the
real change), into the queue, and to the runner, which copies the training code for code tickets
and lays these files over it. A replicate is a copy of the written ticket, so it trains the same
code; the same draft asked again (a resumed run) reuses the recorded result (``result.json``).

Whatever goes wrong (no submit, nothing changed, a deleted file, a symlink, too much changed)
drops the draft with the reason on record and tells the proposer; the unchanged code is never
trained under a code ticket's name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agents.code_agent import CodeAgent, CodeTools, CommandRunner, sandbox_runner
from agents.context import ProposerContext
from agents.graph import LoopDeps
from agents.llm import LLMCaller, make_provider
from agents.proposer import Proposer, Rejected, TicketDraft
from agents.workspace import PathRefused, TreeRefused, Workspace, walk_files
from runner import TRAINING_PACKAGES
from segfactory.errors import SegfactoryError, UsageError
from segfactory.files import remove_tree, write_atomic
from segfactory.home import SOURCE_ROOT, Home
from segfactory.records import Actor, TicketKind, canonical_json
from segfactory.seams import AuditSink

ARM_DIR = "code-agent"  # runs/<run>/code-agent/<draft key>/: the agent's workspace and result (agent-visible)
CODE_DIR = "code"  # the training-code copy inside the agent's workspace, as validation names it
RESULT_FILE = (
    "result.json"  # beside the workspace: the agent's files or its failure, for replicates and resumes
)
MAX_CHANGED_FILES = 20  # past this: the draft is dropped, with the counts on record
MAX_CHANGED_BYTES = 512 * 1024  # all changed files together; past this: the draft is dropped
_SKIPPED = ("__pycache__",)  # left by the agent's own `run` of python; not part of the change
_SKIPPED_SUFFIXES = (".pyc",)


class CodeArmFailed(SegfactoryError):
    """The code-editing agent produced no change the ticket can train; the reason is for people."""


class ArmResult(BaseModel):
    """What one agent session left: the changed files, or why there are none."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    files: dict[str, str] = {}
    error: str = ""
    summary: str = ""
    steps: int = 0
    stopped_by: str = ""


class CodeArm:
    """Runs the code-editing agent for code drafts, one workspace per draft under ``root``.

    ``caller`` is the LLM (actor ``code-agent``; every exchange is audited by ``agents.llm``),
    ``runner`` executes the agent's ``run`` tool in the sandbox. A draft is keyed by the digest
    of its canonical JSON, so the same draft (a resumed run asking again) reuses its result.
    """

    def __init__(
        self,
        caller: LLMCaller,
        runner: CommandRunner,
        sink: AuditSink,
        *,
        root: Path,
        run_id: str,
        home: Path | None = None,
        max_steps: int | None = None,
    ) -> None:
        self.caller, self.runner, self.sink = caller, runner, sink
        self.root, self.run_id, self.home = root, run_id, home
        self.max_steps = max_steps

    def _audit(self, event: str, payload: dict[str, object]) -> None:
        self.sink.append(Actor.CODE_AGENT.value, event, payload, run_id=self.run_id)

    def write(self, draft: TicketDraft) -> TicketDraft:
        """``draft`` with ``change["files"]`` written by the agent; ``CodeArmFailed`` when there is none."""
        key = draft_key(draft)
        record = self.root / key / RESULT_FILE
        if record.is_file():
            result = ArmResult.model_validate_json(record.read_text())
            self._audit("code_agent_reused", {"draft": key, "failed": bool(result.error)})
        else:
            work = self.root / key / "work"
            result = self._session(draft, key, work)
            write_atomic(record, result.model_dump_json(indent=2))  # whole or absent after a crash
            if not result.error:  # its files are in the record: the copy (and what ran in it) goes
                self._audit("workspace_removed", {"draft": key, "complete": not remove_tree(work)})
        if result.error:
            raise CodeArmFailed(result.error)
        return draft.model_copy(update={"change": {**draft.change, "files": result.files}})

    def _session(self, draft: TicketDraft, key: str, work: Path) -> ArmResult:
        _fresh(work)
        workspace = Workspace(work, writable=CODE_DIR, home=self.home)
        drafted = draft.change.get("files")
        for name, text in drafted.items() if isinstance(drafted, dict) else ():  # the proposer's own draft
            try:
                workspace.write(str(name), str(text))
            except (PathRefused, OSError, ValueError) as exc:
                return ArmResult(error=f"the proposer's draft of {name!r} cannot be written: {exc}")
        tools = CodeTools(workspace, self.runner, self.sink, run_id=self.run_id, ticket_id=key)
        agent = CodeAgent(self.caller, tools, **({"max_steps": self.max_steps} if self.max_steps else {}))
        task = task_text(draft)
        self._audit("code_agent_start", {"draft": key, "workspace": str(work), "task": task})
        try:
            outcome = agent.run(task)
        except SegfactoryError as exc:  # e.g. the sandbox behind the run tool failed: this draft, not the run
            return ArmResult(error=f"the code agent's session failed: {exc}", stopped_by="error")
        if not outcome.submitted:
            return ArmResult(
                error=f"the code agent did not submit ({outcome.stopped_by}: {outcome.summary})",
                steps=outcome.steps,
                stopped_by=outcome.stopped_by,
            )
        try:
            files = changed_files(workspace)
        except CodeArmFailed as exc:
            return ArmResult(
                error=str(exc), summary=outcome.summary, steps=outcome.steps, stopped_by="submit"
            )
        self._audit(
            "code_agent_files",
            {
                "draft": key,
                "files": {
                    name: {"bytes": len(text.encode()), "sha256": hashlib.sha256(text.encode()).hexdigest()}
                    for name, text in files.items()
                },
            },
        )
        return ArmResult(files=files, summary=outcome.summary, steps=outcome.steps, stopped_by="submit")


def draft_key(draft: TicketDraft) -> str:
    """``d-<12 hex>``: the digest of the draft's canonical JSON (the ticket id is not known yet)."""
    return "d-" + hashlib.sha256(canonical_json(draft.model_dump(mode="json"))).hexdigest()[:12]


def task_text(draft: TicketDraft) -> str:
    """The agent's task: the draft as the proposer wrote it (no score, no budget numbers)."""
    planned = draft.change.get("files", [])
    names = sorted(map(str, planned)) if isinstance(planned, dict | list) else []
    rest = {k: v for k, v in draft.change.items() if k != "files"}
    effect = draft.expected_effect
    lines = [
        f"Hypothesis: {draft.hypothesis}",
        f"Expected effect: {effect.metric} on {effect.slice}, {effect.direction.value}.",
        f"Files the proposer means to change: {', '.join(names) or '(not named)'}.",
        f"The rest of its change: {json.dumps(rest, sort_keys=True)}" if rest else "",
        f"The training code (the `vision` package) is in {CODE_DIR}/. Edit it so the hypothesis is tested "
        "and training still runs; keep the change small. Then call submit with a one-line summary.",
    ]
    return "\n".join(line for line in lines if line)


def _fresh(work: Path) -> None:
    """A new workspace holding a copy of the training code; a half-finished one is set aside."""
    if work.exists():
        aside = work.parent.parent / ".crashed" / f"{work.parent.name}-{int(time.time())}"
        aside.parent.mkdir(parents=True, exist_ok=True)
        work.rename(aside)
    for package in TRAINING_PACKAGES:
        shutil.copytree(
            SOURCE_ROOT / package,
            work / CODE_DIR / package,
            symlinks=False,
            ignore=shutil.ignore_patterns(*_SKIPPED, *(f"*{s}" for s in _SKIPPED_SUFFIXES)),
        )


def changed_files(workspace: Workspace) -> dict[str, str]:
    """Every file under ``code/`` that differs from the source tree, read beneath the root.

    Symlinks, special files and deleted files cannot be expressed as a code change, so they fail
    the draft, as do more than MAX_CHANGED_FILES files or MAX_CHANGED_BYTES bytes, and a tree
    past the workspace's walk bounds (``agents.workspace.MAX_WALK_DEPTH``, ``MAX_WALK_ENTRIES``).
    """
    seen: set[str] = set()
    files: dict[str, str] = {}
    for name in _walk(workspace, CODE_DIR):
        seen.add(name)
        try:
            text, truncated, size = workspace.read(name)
        except (PathRefused, OSError) as exc:  # swapped for a link or a FIFO after the walk
            raise CodeArmFailed(f"the code agent's {name} cannot be read back: {exc}") from None
        if truncated:
            raise CodeArmFailed(f"the code agent left {name} at {size} bytes, over the read limit")
        source = SOURCE_ROOT / name.removeprefix(f"{CODE_DIR}/")
        if not source.is_file() or source.read_text(errors="replace") != text:
            files[name] = text
    deleted = sorted(n for n in _source_files() if n not in seen)
    if deleted:
        raise CodeArmFailed(
            f"the code agent deleted {', '.join(deleted[:5])}; a code ticket can only change or add files"
        )
    if not files:
        raise CodeArmFailed(
            "the code agent submitted without changing any file; nothing differs from the parent"
        )
    total = sum(len(t.encode()) for t in files.values())
    if len(files) > MAX_CHANGED_FILES or total > MAX_CHANGED_BYTES:
        raise CodeArmFailed(
            f"the code agent changed {len(files)} files, {total} bytes; at most "
            f"MAX_CHANGED_FILES={MAX_CHANGED_FILES} and MAX_CHANGED_BYTES={MAX_CHANGED_BYTES}"
        )
    return files


def _walk(workspace: Workspace, folder: str) -> list[str]:
    """Every regular file beneath ``folder``; CodeArmFailed for a link, a special file, or a tree
    too deep or too large to read back (the draft fails, the run goes on)."""
    try:
        return walk_files(workspace, folder, skip=_SKIPPED, skip_suffixes=_SKIPPED_SUFFIXES)
    except TreeRefused as exc:
        if exc.kind:
            raise CodeArmFailed(
                f"the code agent left a {exc.kind} at {exc.path}; only regular files can be a code change"
            ) from None
        raise CodeArmFailed(f"the code agent's workspace cannot be read back: {exc}") from None


def _source_files() -> list[str]:
    out = []
    for package in TRAINING_PACKAGES:
        for dirpath, dirnames, filenames in os.walk(SOURCE_ROOT / package):
            dirnames[:] = [d for d in dirnames if d not in _SKIPPED]
            rel = Path(dirpath).relative_to(SOURCE_ROOT)
            out += [
                f"{CODE_DIR}/{(rel / f).as_posix()}" for f in filenames if not f.endswith(_SKIPPED_SUFFIXES)
            ]
    return out


class CodeArmProposer(Proposer):
    """``inner``'s drafts, with every code draft's files written by a :class:`CodeArm`.

    A code draft the arm cannot write is dropped (audited as ``code_agent_failed``) and shown to
    ``inner`` among the rejected drafts of its next call, with the reason, so an LLM proposer
    learns of it. Other drafts pass unchanged. The written drafts then go through the run's
    validation like any other (``propose_valid``).
    """

    def __init__(self, inner: Proposer, arm: CodeArm) -> None:
        self.inner = inner
        self.arm = arm
        self.name = inner.name
        self.failed: list[Rejected] = []

    def propose(
        self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()
    ) -> list[TicketDraft]:
        drafts = self.inner.propose(context, n, [*rejected, *self.failed])
        out = []
        for draft in drafts:
            if draft.kind is not TicketKind.CODE:
                out.append(draft)
                continue
            try:
                out.append(self.arm.write(draft))
            except CodeArmFailed as exc:
                self.arm.sink.append(
                    Actor.CODE_AGENT.value,
                    "code_agent_failed",
                    {"draft": draft.model_dump(mode="json"), "reason": str(exc)},
                    run_id=self.arm.run_id,
                )
                self.failed.append(Rejected(draft=draft, reasons=[f"the code-editing agent: {exc}"]))
        return out


def with_code_arm(deps: LoopDeps, *, proposer: str, backend: str, home: Home, run_id: str) -> CodeArmProposer:
    """``deps.proposer`` with the code arm behind it: the agent talks to ``proposer``'s provider
    (actor ``code-agent``, tokens on the run's meter) and runs commands in the ``backend``
    sandbox. A run with the rules proposer has no LLM for the agent, so it is refused here."""
    if proposer == "rules":
        raise UsageError(
            "--code-agent needs an LLM proposer (--proposer openai:MODEL, anthropic:MODEL or "
            "local:URL): the code-editing agent uses the proposer's provider"
        )
    provider = make_provider(proposer, deps.sink, Actor.CODE_AGENT, run_id=run_id)
    caller = LLMCaller(provider, deps.sink, deps.usage, Actor.CODE_AGENT, run_id=run_id)
    arm = CodeArm(
        caller,
        sandbox_runner(backend),
        deps.sink,
        root=home.runs / run_id / ARM_DIR,
        run_id=run_id,
        home=home.root,
    )
    return CodeArmProposer(deps.proposer, arm)


__all__ = [
    "ArmResult",
    "CodeArm",
    "CodeArmFailed",
    "CodeArmProposer",
    "draft_key",
    "changed_files",
    "task_text",
    "with_code_arm",
]
