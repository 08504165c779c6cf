"""Fixtures for sandbox tests: one parametrised ``backend`` fixture runs a test on every backend.

Docker tests carry the ``docker`` mark; where the engine does not answer, the fixture tries to
start it (as root, with ``dockerd``) and skips with the reason only when that fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox import Limits, SandboxBackend, SandboxResult, SandboxSpec, get_backend, load_policy
from segfactory.errors import SandboxError

DOCKERD_START_S = 30  # how long we wait for a dockerd we started
_docker_state: dict[str, str | None] = {}


def docker_problem() -> str | None:
    if "problem" not in _docker_state:
        _docker_state["problem"] = _start_docker()
    return _docker_state["problem"]


def _ping() -> str | None:
    try:
        get_backend("docker").check_available()
    except SandboxError as exc:
        return str(exc)
    return None


def _start_docker() -> str | None:
    problem = _ping()
    if problem is None or os.geteuid() != 0 or shutil.which("dockerd") is None:
        return problem
    with open("/var/log/segfactory-dockerd.log", "ab") as log:
        subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + DOCKERD_START_S
    while time.monotonic() < deadline:
        if (problem := _ping()) is None:
            return None
        time.sleep(0.5)
    return problem


@pytest.fixture(
    params=[
        pytest.param("bwrap", marks=pytest.mark.bwrap),
        pytest.param("docker", marks=pytest.mark.docker),
    ]
)
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if request.param == "docker" and (problem := docker_problem()):
        pytest.skip(f"no Docker engine could be started: {problem}")
    return get_backend(request.param)


def small_limits(**overrides: Any) -> Limits:
    """Policy defaults with overrides (small limits keep bomb tests fast)."""
    return load_policy().defaults.model_copy(update=overrides)


@pytest.fixture
def run_in(backend: SandboxBackend, tmp_path: Path) -> Callable[..., SandboxResult]:
    """Run a shell snippet (or argv) in a fresh sandbox with workspace ``tmp_path/ws``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def run(command: str | list[str], **spec: Any) -> SandboxResult:
        argv = ["sh", "-c", command] if isinstance(command, str) else command
        spec.setdefault("timeout_s", 30)
        return backend.run(SandboxSpec(command=argv, workspace=spec.pop("workspace", workspace), **spec))

    return run


@pytest.fixture
def docker_backend() -> SandboxBackend:
    """The docker backend alone (for docker-only behaviour); skips only when no engine starts."""
    if problem := docker_problem():
        pytest.skip(f"no Docker engine could be started: {problem}")
    return get_backend("docker")
