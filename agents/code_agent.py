"""The code-editing agent (arm ``agent-code``): tools over a workspace, a tool-calling loop.

Tools: ``list_files``, ``read_file``, ``write_file``, ``run`` (through the sandbox, via an
injected :data:`CommandRunner`) and ``submit``. Every call is an audit record (``tool_call``,
actor ``code-agent``); a refused path is also recorded as ``path_escape_attempt`` or
``protected_read_attempt``, which ``audit check`` reports. Tool misuse is answered with a
corrective tool message, never an exception: the loop goes on until ``submit``, the step cap,
the token budget or an LLM failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.llm import LLMCaller, LLMFailed, ToolResultTurn, ToolSpec, Turn, UserTurn
from agents.prompts import load_prompt
from agents.workspace import PathRefused, Workspace
from sandbox import SandboxEvent, SandboxSpec, get_backend
from segfactory.errors import LimitExceeded
from segfactory.records import Actor
from segfactory.seams import AuditSink

MAX_AGENT_STEPS = 30  # model replies per task; past it the task ends unsubmitted ("step cap")
MAX_TOOL_OUTPUT_CHARS = 8000  # per tool result sent back to the model; past it: cut, marked truncated
RUN_TIMEOUT_S = 300.0  # default and maximum for one `run` command


class CommandResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    events: list[SandboxEvent] = []  # host-seen sandbox events (decoy hits ...); each is audited


CommandRunner = Callable[[list[str], Path, float], CommandResult]


def sandbox_runner(backend: str) -> CommandRunner:
    """A :data:`CommandRunner` that executes through ``sandbox.get_backend(backend)``."""

    def run(command: list[str], workspace: Path, timeout_s: float) -> CommandResult:
        result = get_backend(backend).run(
            SandboxSpec(command=command, workspace=workspace, timeout_s=timeout_s)
        )
        return CommandResult(
            exit_code=result.exit_code,
            stdout=_text(result.stdout),
            stderr=_text(result.stderr),
            timed_out=bool(result.timed_out),
            events=list(result.events),
        )

    return run


def _text(output: Any) -> str:
    """A sandbox ``Output`` (capped bytes) as text, marked when the sandbox truncated it."""
    text: str = output.data.decode(errors="replace")
    return text + f"\n[truncated: {output.size} bytes in all]" if output.truncated else text


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListArgs(_Args):
    path: str = "."


class ReadArgs(_Args):
    path: str


class WriteArgs(_Args):
    path: str
    content: str


class RunArgs(_Args):
    command: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=RUN_TIMEOUT_S, gt=0, le=RUN_TIMEOUT_S)


class SubmitArgs(_Args):
    summary: str = Field(min_length=1, max_length=4000)


_TOOLS: dict[str, tuple[type[_Args], str]] = {
    "list_files": (ListArgs, "List a directory of the workspace (relative path)."),
    "read_file": (ReadArgs, "Read a text file of the workspace (relative path)."),
    "write_file": (WriteArgs, "Write a text file under code/ (relative path)."),
    "run": (RunArgs, "Run a command (argv list) in the sandbox; the workspace is /work."),
    "submit": (SubmitArgs, "Finish: the host trains and evaluates the code as it is now."),
}
TOOL_SPECS = tuple(
    ToolSpec(name=n, description=d, parameters=m.model_json_schema()) for n, (m, d) in _TOOLS.items()
)


class CodeTools:
    """The tools, bound to one workspace, one runner and the audit sink."""

    def __init__(
        self,
        workspace: Workspace,
        runner: CommandRunner,
        sink: AuditSink,
        *,
        run_id: str | None = None,
        ticket_id: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.runner = runner
        self.sink = sink
        self.run_id = run_id
        self.ticket_id = ticket_id
        self.submitted: str | None = None

    def _audit(self, event: str, payload: dict[str, object]) -> None:
        self.sink.append(
            Actor.CODE_AGENT.value, event, {"ticket": self.ticket_id, **payload}, run_id=self.run_id
        )

    def call(self, name: str, arguments: str) -> str:
        """Run one tool call and return the message for the model; audits everything."""
        try:
            result = self._dispatch(name, arguments)
            ok = True
        except PathRefused as exc:
            self._audit(exc.kind, {"tool": name, "path": exc.path})
            result, ok = f"error: {exc}", False
        except (OSError, ValueError, ValidationError, KeyError) as exc:
            result, ok = f"error: {_short(exc)}", False
        # The record keeps the arguments whole (a large one goes to a blob, which `audit check`
        # opens) and the result as the model got it, with its original length when that was cut.
        shown = _cap(result)
        self._audit(
            "tool_call",
            {
                "tool": name,
                "arguments": arguments,
                "ok": ok,
                "result": shown,
                "result_chars": len(result),
                "result_truncated": shown != result,
            },
        )
        return shown

    def _dispatch(self, name: str, arguments: str) -> str:
        if name not in _TOOLS:
            raise KeyError(f"unknown tool {name!r}; tools: {', '.join(_TOOLS)}")
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON ({exc.msg}); send a JSON object") from exc
        args = _TOOLS[name][0].model_validate(raw)
        result: str = getattr(self, f"_{name}")(args)
        return result

    def _list_files(self, args: ListArgs) -> str:
        entries, truncated = self.workspace.list(args.path)
        return json.dumps({"entries": entries, "truncated": truncated})

    def _read_file(self, args: ReadArgs) -> str:
        text, truncated, size = self.workspace.read(args.path)
        return json.dumps({"content": text, "truncated": truncated, "size": size})

    def _write_file(self, args: WriteArgs) -> str:
        return json.dumps({"written": self.workspace.write(args.path, args.content)})

    def _run(self, args: RunArgs) -> str:
        result = self.runner(args.command, self.workspace.root, args.timeout_s)
        self._audit(
            "sandbox_exec",
            {"command": args.command, "exit_code": result.exit_code, "timed_out": result.timed_out},
        )
        for event in result.events:
            body = event.model_dump(mode="json")
            self._audit(str(body.get("kind", "sandbox_event")), {"tool": "run", **body})
        return result.model_dump_json(exclude={"events"})

    def _submit(self, args: SubmitArgs) -> str:
        self.submitted = args.summary
        return "submitted"


def _short(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return f"invalid arguments: {exc.errors(include_url=False)}"
    return str(exc.args[0]) if isinstance(exc, KeyError) else str(exc)


def _cap(text: str) -> str:
    if len(text) <= MAX_TOOL_OUTPUT_CHARS:
        return text
    return text[:MAX_TOOL_OUTPUT_CHARS] + f"\n[truncated: {len(text)} chars in all]"


class AgentOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    submitted: bool
    summary: str
    steps: int
    stopped_by: str  # submit | step_cap | llm_failed | token_budget


class CodeAgent:
    """The tool-calling loop over an :class:`~agents.llm.LLMCaller` (OpenAI or Anthropic)."""

    def __init__(self, caller: LLMCaller, tools: CodeTools, *, max_steps: int = MAX_AGENT_STEPS) -> None:
        self.caller = caller
        self.tools = tools
        self.max_steps = max_steps
        self.system = load_prompt("code-agent")

    def run(self, task: str) -> AgentOutcome:
        turns: list[Turn] = [UserTurn(text=task)]
        for step in range(1, self.max_steps + 1):
            try:
                reply = self.caller.chat(self.system, turns, TOOL_SPECS)
            except (LLMFailed, LimitExceeded) as exc:
                return self._end(
                    False, str(exc), step, "llm_failed" if isinstance(exc, LLMFailed) else "token_budget"
                )
            turns.append(reply.as_turn())
            if not reply.tool_calls:
                turns.append(UserTurn(text="Call exactly one of the tools; finish with `submit`."))
                continue
            for call in reply.tool_calls:
                turns.append(
                    ToolResultTurn(
                        call_id=call.id, name=call.name, content=self.tools.call(call.name, call.arguments)
                    )
                )
            if self.tools.submitted is not None:
                return self._end(True, self.tools.submitted, step, "submit")
        return self._end(False, f"no submit within {self.max_steps} steps", self.max_steps, "step_cap")

    def _end(self, submitted: bool, summary: str, steps: int, stopped_by: str) -> AgentOutcome:
        outcome = AgentOutcome(submitted=submitted, summary=summary, steps=steps, stopped_by=stopped_by)
        self.tools._audit("code_agent_end", outcome.model_dump(mode="json"))
        return outcome
