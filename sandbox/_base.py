"""The sandbox backend interface and its registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from sandbox._policy import SandboxPolicy, load_policy
from sandbox._records import SandboxEvent, SandboxResult, SandboxSpec, VerifyReport
from sandbox._verify import verify_backend

EventHook = Callable[[SandboxEvent], None]


class SandboxBackend(ABC):
    """Runs one command under the ticket policy (``policies/sandbox.yaml``).

    Guarantees, whatever the backend: no network (only ``lo``), a read-only root, a tmpfs
    ``/tmp``, no capabilities, a non-root uid, no new privileges, cpu/memory (swap included)/pids
    limits, a wall-time limit enforced inside (``timeout -k``) and from outside (kill), capped
    output, ``/work`` capped in bytes and inodes (by the kernel, except in a developer's own
    bwrap: ``sandbox._session``), host environment variables never passed, and only the
    mounts the spec names plus the runtime (never the repo root, a home, the vault or the docker
    socket). Decoy opens are seen by the host and reported as events, live through ``on_event``
    and on the result.

    Raises: ``PolicyError`` for a spec the policy refuses (before anything starts);
    ``SandboxError`` when the backend cannot start (the message says how to fix it).
    A command that fails, times out or is OOM-killed is a result, not an exception.
    """

    name: str = ""

    def __init__(self, policy: SandboxPolicy | None = None) -> None:
        self.policy = policy or load_policy()

    @abstractmethod
    def check_available(self) -> None:
        """Raise SandboxError, saying what to do, when this backend cannot start sandboxes."""

    @abstractmethod
    def run(self, spec: SandboxSpec, on_event: EventHook | None = None) -> SandboxResult:
        """Run ``spec.command`` in a fresh sandbox and return what happened."""

    def verify(self, home: Path | None = None) -> VerifyReport:
        """Start a real sandbox and check the policy from inside (see ``sandbox._verify``);
        ``home`` (default: the default home) gets a canary planted in its vault for the check."""

        return verify_backend(self, home)

    def limit_evidence(self) -> dict[str, object]:
        """Host-side readback of the limits applied to the last run (for ``verify``)."""
        return {}


_REGISTRY: dict[str, type[SandboxBackend]] = {}


def register_backend(cls: type[SandboxBackend]) -> type[SandboxBackend]:
    """Class decorator: make a backend available to ``get_backend`` under ``cls.name``."""
    _REGISTRY[cls.name] = cls
    return cls


def known_backends() -> list[str]:
    return sorted(_REGISTRY)


def get_backend(name: str, policy: SandboxPolicy | None = None) -> SandboxBackend:
    """The backend registered as ``name``; ValueError listing the known ones otherwise."""
    if name not in _REGISTRY:
        raise ValueError(f"sandbox backend {name!r} is not registered; known: {', '.join(known_backends())}")
    return _REGISTRY[name](policy)
