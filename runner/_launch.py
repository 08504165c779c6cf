"""How the runner starts a worker: the ``WorkerLauncher`` interface and its sandbox implementation.

The runner never runs ticket code on the host. ``SandboxLauncher`` runs it through a sandbox
backend (``sandbox.get_backend``) with the workspace at ``/work`` and the dataset version
read-only at ``/data/train`` and ``/data/dev``. Whatever a launcher returns is a description of
the process (exit status, time, captured output), never evidence about the model.

What the host saw during the run (decoy opens, monitoring gaps, kills) is audited by
``audit_sandbox_events`` as records of their own, actor ``sandbox``, so ``audit check`` and the
report see a ticket's protected reads the same way as those of any other sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from sandbox import SandboxSpec, get_backend, load_policy
from segfactory.files import write_atomic
from segfactory.records import Actor
from segfactory.seams import AuditSink

TAIL_BYTES = 8 * 1024  # stdout/stderr kept in a LaunchResult; past it: the tail, *_truncated=true, *_bytes


class LaunchRequest(BaseModel):
    """One worker process to run. ``memory_bytes`` None takes the launcher's default limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] = Field(min_length=1)
    workspace: Path  # mounted read-write at /work, the working directory
    data: dict[str, Path]  # name -> split folder, mounted read-only at /data/<name>
    extra_ro: dict[str, Path] = Field(default_factory=dict)  # target inside -> host path, read-only
    timeout_s: float = Field(gt=0)  # wall time; past it the worker is killed from outside
    memory_bytes: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    gpus: list[int] = Field(
        default_factory=list
    )  # device minors the scheduler assigned; the sandbox gets only these
    cpus: float | None = Field(
        default=None, gt=0
    )  # the scheduler's share of the cores; tightens the policy's only
    live: list[str] = Field(default_factory=list)  # beneath /work: read by the host while it runs


class LaunchResult(BaseModel):
    """What happened to the process (not to the model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exit_code: int
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = Field(ge=0)
    stdout_tail: str = ""
    stderr_tail: str = ""
    stdout_bytes: int | None = None  # bytes the process wrote in all (None: the launcher did not count)
    stderr_bytes: int | None = None
    stdout_truncated: bool = False  # true when the tail holds less than the process wrote
    stderr_truncated: bool = False
    events: list[dict[str, object]] = Field(default_factory=list)  # sandbox events, for the audit log


class WorkerLauncher(Protocol):
    """Runs one worker process under the ticket policy and waits for it.

    Guarantees: the process sees only the request's workspace (rw), data and ``extra_ro`` (ro)
    besides its runtime; it is killed
    once ``timeout_s`` has passed (``timed_out`` true) or when it exceeds its memory limit
    (``oom_killed`` true, or exit 137). Raises SandboxError when it cannot start the process.
    """

    name: str

    def launch(self, request: LaunchRequest) -> LaunchResult: ...


def tail(data: bytes, limit: int = TAIL_BYTES) -> str:
    return data[-limit:].decode("utf-8", errors="replace")


def audit_sandbox_events(
    audit: AuditSink, events: Sequence[dict[str, object]], *, ticket_id: str, run_id: str | None, attempt: int
) -> None:
    """One ``sandbox`` record per host-seen event, named by its kind (``protected_read_attempt``...)."""
    for event in events:
        kind = str(event.get("kind", "sandbox_event"))
        audit.append(
            Actor.SANDBOX, kind, {**event, "ticket_id": ticket_id, "attempt": attempt}, run_id=run_id
        )


HOST_CONFIG_FILE = "host_config.yaml"  # in the ticket folder, beside (not in) the sandbox's work/


def keep_host_config(ticket_dir: Path, config: Mapping[str, object]) -> Path:
    """Keep the host's own copy of the config a ticket trained with, outside the workspace.

    ``work/config.yaml`` is in the sandbox's hands (rewritten, or swapped for a symlink, by the
    code that trained); whatever later re-derives the ticket (a challenge) reads this copy instead.
    Written to a temp file and renamed, so a reader sees a whole copy or none.
    """
    import yaml

    target = ticket_dir / HOST_CONFIG_FILE
    write_atomic(target, yaml.safe_dump(config, sort_keys=False), mode=0o644)
    return target


class OutputRecord(TypedDict):
    """A launch's captured output as the audit keeps it (``output_record``)."""

    stderr_tail: str
    stderr_bytes: int | None
    stderr_truncated: bool
    stdout_bytes: int | None
    stdout_truncated: bool


def output_record(result: LaunchResult) -> OutputRecord:
    """The captured output as an audit payload: the tails, their original sizes, whether cut."""
    return {
        "stderr_tail": result.stderr_tail,
        "stderr_bytes": result.stderr_bytes,
        "stderr_truncated": result.stderr_truncated,
        "stdout_bytes": result.stdout_bytes,
        "stdout_truncated": result.stdout_truncated,
    }


class SandboxLauncher:
    """A WorkerLauncher over a registered sandbox backend (``docker`` or ``bwrap``)."""

    def __init__(self, backend: str, *, decoys: bool = True) -> None:
        self.name = backend
        self.decoys = decoys

    def launch(self, request: LaunchRequest) -> LaunchResult:
        limits = None
        if request.memory_bytes is not None or request.cpus is not None:
            defaults = load_policy().defaults
            update: dict[str, float | int] = {}
            if request.memory_bytes is not None:
                update["memory_bytes"] = request.memory_bytes
            if request.cpus is not None:  # a share of the cores never loosens the policy's limit
                update["cpus"] = min(defaults.cpus, request.cpus)
            limits = defaults.model_copy(update=update)
        spec = SandboxSpec(
            command=request.command,
            workspace=request.workspace,
            data=request.data,
            extra_ro=request.extra_ro,
            timeout_s=request.timeout_s,
            limits=limits,
            env=request.env,
            decoys=self.decoys,
            gpus=request.gpus,
            live=request.live,
        )
        result = get_backend(self.name).run(spec)
        out, err = result.stdout, result.stderr
        return LaunchResult(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            oom_killed=result.oom_killed,
            duration_s=result.duration_s,
            stdout_tail=tail(out.data),
            stderr_tail=tail(err.data),
            stdout_bytes=out.size,
            stderr_bytes=err.size,
            stdout_truncated=out.truncated or out.size > TAIL_BYTES,
            stderr_truncated=err.truncated or err.size > TAIL_BYTES,
            events=[event.model_dump(mode="json") for event in result.events],
        )
