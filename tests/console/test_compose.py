"""docker-compose.yml as compose reads it: who mounts the vault, the gate socket, the Docker socket."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose is not installed"
)


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    out = subprocess.run(
        ["docker-compose", "-f", str(REPO / "docker-compose.yml"), "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PWD": str(REPO)},
    )
    assert out.returncode == 0, out.stderr
    services: dict[str, Any] = yaml.safe_load(out.stdout)["services"]
    return services


def _sources(service: dict[str, Any]) -> dict[str, str]:
    """Mount source -> target for one service."""
    return {v.split(":")[0]: v.split(":")[1] for v in service["volumes"]}


def test_three_services(stack: dict[str, Any]) -> None:
    assert set(stack) == {"gate", "console", "worker"}


def test_the_vault_volume_is_mounted_only_into_the_gate(stack: dict[str, Any]) -> None:
    assert [name for name, s in stack.items() if "vault" in _sources(s)] == ["gate"]
    assert _sources(stack["gate"])["vault"].endswith("/vault")


def test_the_gate_socket_volume_is_shared_with_worker_and_console(stack: dict[str, Any]) -> None:
    targets = {name: _sources(s).get("gate-run") for name, s in stack.items()}
    assert len(set(targets.values())) == 1 and None not in targets.values()


def test_only_the_worker_gets_the_docker_socket(stack: dict[str, Any]) -> None:
    assert [name for name, s in stack.items() if "/var/run/docker.sock" in _sources(s)] == ["worker"]


def test_console_is_published_on_loopback_only_and_the_gate_has_no_network(stack: dict[str, Any]) -> None:
    assert all(str(p).startswith("127.0.0.1:") for p in stack["console"]["ports"])
    assert stack["gate"]["network_mode"] == "none"


def test_paths_match_the_host_so_sandbox_mounts_resolve(stack: dict[str, Any]) -> None:
    worker = stack["worker"]
    assert _sources(worker)[str(REPO)] == str(REPO) and worker["working_dir"] == str(REPO)
    home = worker["environment"]["SEGFACTORY_HOME"]
    assert _sources(worker)[home] == home
