"""Typed records of the sandbox API: what to run (SandboxSpec), what happened (SandboxResult)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox._policy import Limits

SCHEMA_VERSION = 1
RESERVED_TARGETS = (
    "/work",
    "/data",
    "/opt",
    "/usr",
    "/etc",
    "/proc",
    "/dev",
    "/tmp",
    "/run",
    "/vault",
    "/bin",
    "/lib",
    "/lib64",
    "/sbin",
    "/sys",
)
DetailValue = str | int | float | bool  # a SandboxEvent's detail holds flat scalars only
EventKind = Literal[
    "protected_read_attempt",  # a decoy was opened (host inotify; whatever the reader)
    "monitoring_gap",  # opens or hook records may have been missed (a queue overflow, a cap, a flood)
    # reported by the in-sandbox audit hook (sandbox_reported=true), whether the attempt succeeded:
    "file_open",  # an open or listing outside the ordinary read roots, or of a denied path
    "file_write",  # a write, or a change to the tree, outside /work and /tmp
    "socket_call",  # a connect, bind, sendto or sendmsg
    "ctypes_call",  # a foreign library, a symbol lookup, a foreign call, a raw memory access
    "process_spawn",  # a process started (it may run without the hook)
    "hook_malformed",  # a hook datagram that was cut or is no record: the sandbox sent it
    "workspace_limit",  # /work was full (limits.workspace_bytes or workspace_files); the sandbox was killed
    "timeout_kill",  # the wall-time limit passed; the sandbox was killed from outside
]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1


class SandboxSpec(_Record):
    """One command to run under the ticket policy.

    ``workspace`` is mounted read-write at ``/work`` (the working directory); each ``data``
    entry read-only at ``/data/<name>``; each ``extra_ro`` entry read-only at its key (an absolute
    path inside the sandbox). Paths are checked by ``sandbox._paths.check_mountable`` when a
    backend starts the run. ``limits=None`` takes the policy defaults; ``timeout_s=None`` takes
    ``limits.timeout_s``. ``env`` is the whole caller-chosen environment: host variables never pass.
    ``gpus`` are the device minors of the GPUs the scheduler assigned; the sandbox gets those and
    no other (``segfactory.gpus``), and a GPU this machine lacks is refused before anything starts.
    ``live`` names files beneath ``/work`` the host reads while the sandbox runs
    (``sandbox.live_workspace``): a backend whose /work the host cannot reach in place copies
    those, at most ``LIVE_CAP_BYTES`` each, and nothing else.
    """

    command: list[str] = Field(min_length=1)
    workspace: Path
    data: dict[str, Path] = Field(default_factory=dict)
    extra_ro: dict[str, Path] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0)
    limits: Limits | None = None
    env: dict[str, str] = Field(default_factory=dict)
    decoys: bool = True
    gpus: list[int] = Field(default_factory=list)  # device minors of the GPUs assigned (segfactory.gpus)
    live: list[str] = Field(default_factory=list, max_length=8)  # relative to /work

    @field_validator("live")
    @classmethod
    def _live_paths(cls, value: list[str]) -> list[str]:
        for name in value:
            pure = PurePosixPath(name)
            if pure.is_absolute() or ".." in pure.parts or not pure.parts:
                raise ValueError(f"live path {name!r} must be relative to /work, without '..'")
        return value

    @field_validator("data")
    @classmethod
    def _data_names(cls, value: dict[str, Path]) -> dict[str, Path]:
        for name in value:
            if not name.replace("-", "").replace("_", "").isalnum() or name == "holdout":
                raise ValueError(f"data name {name!r} must be alphanumeric (-, _) and not 'holdout'")
        return value

    @field_validator("extra_ro")
    @classmethod
    def _extra_targets(cls, value: dict[str, Path]) -> dict[str, Path]:
        for target in value:
            pure = PurePosixPath(target)
            if not pure.is_absolute() or ".." in pure.parts:
                raise ValueError(f"extra_ro target {target!r} must be an absolute path without '..'")
            if any(str(pure) == r or str(pure).startswith(r + "/") for r in RESERVED_TARGETS):
                raise ValueError(f"extra_ro target {target!r} is reserved: {', '.join(RESERVED_TARGETS)}")
        return value


class SandboxEvent(_Record):
    """Something the host saw (or the sandbox reported) during a run; goes to the audit log."""

    kind: EventKind
    ts: float  # unix time on the host
    path: str | None = None  # the path inside the sandbox, where there is one
    sandbox_reported: bool = False  # true: from code inside the sandbox, not evidence
    detail: dict[str, DetailValue] = Field(default_factory=dict)


class Output(_Record):
    """Captured bytes of one stream, capped (trust rule 11)."""

    data: bytes = b""
    size: int = 0  # bytes the command wrote in all
    truncated: bool = False  # true when size > len(data)


class SandboxResult(_Record):
    """What a run did. Never evidence about a model: only the host-side checks are."""

    backend: str
    exit_code: int  # the command's exit status; 128+N for a signal N; 124 for the inner timeout
    stdout: Output
    stderr: Output
    timed_out: bool
    oom_killed: bool
    duration_s: float
    events: list[SandboxEvent] = Field(default_factory=list)


class VerifyCheck(_Record):
    name: str  # mounts, canary, network, uid, capabilities, limits, ...
    ok: bool
    detail: Any = None


class VerifyReport(_Record):
    """``sandbox verify``: what a real sandbox read back from inside, check by check."""

    backend: str
    ok: bool
    checks: list[VerifyCheck]
    duration_s: float
