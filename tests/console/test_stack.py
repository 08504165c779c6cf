"""The compose stack brought up for real: the gate initialises the home and serves its socket, the
console answers on loopback with the token and an intact, gate-anchored chain, and
`sandbox verify` passes inside the worker (no Docker socket in its sandboxes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.console.test_browser import _free_port

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed"),
]
TOKEN = "stack-test-token"
UP_TIMEOUT_S = 420  # the gate's first start runs `segfactory init --profile demo`


def _engine_ok() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[dict[str, str], int]]:
    if not _engine_ok():
        pytest.skip("no Docker engine answers")
    subprocess.run(
        [sys.executable, "-m", "segfactory", "sandbox", "build", "--home", str(tmp_path / "build-home")],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    port = _free_port()
    env = {
        **os.environ,
        "PWD": str(REPO),
        "SEGFACTORY_STACK_HOME": str(tmp_path / "home"),
        "SEGFACTORY_STACK_TMP": str(tmp_path / "scratch"),
        "SEGFACTORY_PYTHON_PREFIX": sys.base_prefix,
        "SEGFACTORY_CONSOLE_PORT": str(port),
        "SEGFACTORY_CONSOLE_TOKEN": TOKEN,
        "COMPOSE_PROJECT_NAME": f"sftest{port}",
    }
    try:
        subprocess.run(
            ["docker-compose", "up", "-d", "gate", "console"],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            timeout=UP_TIMEOUT_S,
        )
        yield env, port
    finally:
        subprocess.run(
            ["docker-compose", "down", "-v", "--timeout", "5"],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=120,
        )


def _wait_for(url: str, deadline_s: float) -> httpx.Response:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return httpx.get(url, timeout=3)
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"nothing answers at {url}"
            time.sleep(1)


def test_stack_serves_the_console_and_verifies_its_sandboxes(stack: tuple[dict[str, str], int]) -> None:
    env, port = stack
    base = f"http://127.0.0.1:{port}"
    assert _wait_for(f"{base}/", 60).status_code == 401
    with httpx.Client(base_url=base, timeout=10, follow_redirects=True) as person:
        assert person.get("/login", params={"token": TOKEN}).status_code == 200
        audit = person.get("/audit").text
        assert "Chain: intact" in audit and "no anchor store consulted" not in audit  # the gate's anchor
    home = Path(env["SEGFACTORY_STACK_HOME"])
    assert not any((home / "vault").iterdir())  # the real vault is the gate's volume, not this folder
    verify = subprocess.run(
        [
            "docker-compose",
            "run",
            "--rm",
            "worker",
            "segfactory",
            "sandbox",
            "verify",
            "--backend",
            "docker",
            "--json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(verify.stdout.strip().splitlines()[-1])
    checks = {c["name"]: c["ok"] for c in report["checks"]}
    assert report["ok"] and checks["docker_socket"] and checks["canary"], checks
