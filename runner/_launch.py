"""How the runner starts a worker: the ``WorkerLauncher`` interface and its sandbox implementation.

The runner never runs ticket code on the host. ``SandboxLauncher`` runs it through a sandbox
backend (``sandbox.get_backend``) with the workspace at ``/work`` and the dataset version
read-only at ``/data/train`` and ``/data/dev``. Whatever a launcher returns is a description of
the process (exit status, time, captured output), never evidence about the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

TAIL_BYTES = 8 * 1024  # stdout/stderr kept in a LaunchResult (the sandbox keeps its own caps)


class LaunchRequest(BaseModel):
    """One worker process to run. ``memory_bytes`` None takes the launcher's default limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] = Field(min_length=1)
    workspace: Path  # mounted read-write at /work, the working directory
    data: dict[str, Path]  # name -> split folder, mounted read-only at /data/<name>
    timeout_s: float = Field(gt=0)  # wall time; past it the worker is killed from outside
    memory_bytes: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)


class LaunchResult(BaseModel):
    """What happened to the process (not to the model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exit_code: int
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = Field(ge=0)
    stdout_tail: str = ""
    stderr_tail: str = ""
    events: list[dict[str, object]] = Field(default_factory=list)  # sandbox events, for the audit log


class WorkerLauncher(Protocol):
    """Runs one worker process under the ticket policy and waits for it.

    Guarantees: the process sees only the request's workspace (rw) and data (ro); it is killed
    once ``timeout_s`` has passed (``timed_out`` true) or when it exceeds its memory limit
    (``oom_killed`` true, or exit 137). Raises SandboxError when it cannot start the process.
    """

    name: str

    def launch(self, request: LaunchRequest) -> LaunchResult: ...


def tail(data: bytes, limit: int = TAIL_BYTES) -> str:
    return data[-limit:].decode("utf-8", errors="replace")


class SandboxLauncher:
    """A WorkerLauncher over a registered sandbox backend (``docker`` or ``bwrap``)."""

    def __init__(self, backend: str, *, decoys: bool = True) -> None:
        self.name = backend
        self.decoys = decoys

    def launch(self, request: LaunchRequest) -> LaunchResult:
        from sandbox import SandboxSpec, get_backend, load_policy

        limits = None
        if request.memory_bytes is not None:
            limits = load_policy().defaults.model_copy(update={"memory_bytes": request.memory_bytes})
        spec = SandboxSpec(
            command=request.command, workspace=request.workspace, data=request.data,
            timeout_s=request.timeout_s, limits=limits, env=request.env, decoys=self.decoys,
        )
        result = get_backend(self.name).run(spec)
        return LaunchResult(
            exit_code=result.exit_code, timed_out=result.timed_out, oom_killed=result.oom_killed,
            duration_s=result.duration_s, stdout_tail=tail(result.stdout.data),
            stderr_tail=tail(result.stderr.data),
            events=[event.model_dump(mode="json") for event in result.events],
        )
