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
    # compose networks, volumes and a worker that starts sandboxes: once, in the parallel part, its
    # `docker-compose run` printed nothing while other tests' sandboxes came and went
    pytest.mark.serial,
    pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed"),
]
TOKEN = "stack-test-token"
IMAGE = "segfactory-sandbox:latest"  # what `segfactory sandbox build` makes
UP_TIMEOUT_S = 420  # the gate's first start runs `segfactory init --profile demo`


def _engine_ok() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def _privileged_ok() -> bool:
    """Whether this Docker engine starts a privileged container (not where Docker itself runs in a
    restricted container, as on this project's CI machines)."""
    probe = subprocess.run(
        ["docker", "run", "--rm", "--privileged", IMAGE, "/bin/true"], capture_output=True, timeout=60
    )
    return probe.returncode == 0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[dict[str, str], int, str]]:
    """The gate and the console up on a fresh home. With the privileged override of docs/console.md
    (where the engine allows it) the gate serves; without it the third value is the gate's output."""
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
    scorer = _privileged_ok()
    files = ["-f", "docker-compose.yml"]
    if scorer:
        override = tmp_path / "docker-compose.scorer.yml"
        override.write_text("services:\n  gate: {privileged: true}\n  worker: {privileged: true}\n")
        files += ["-f", str(override)]
    env["COMPOSE_FILE"] = os.pathsep.join(files[1::2])
    gate_log = ""
    try:
        compose = ["docker-compose", "up", "-d"]
        if scorer:  # the console waits for the gate's socket (its healthcheck)
            subprocess.run([*compose, "gate", "console"], cwd=REPO, env=env, check=True, timeout=UP_TIMEOUT_S)
        else:  # the gate initialises the home, cannot time a confined verdict and exits
            subprocess.run([*compose, "gate"], cwd=REPO, env=env, check=True, timeout=UP_TIMEOUT_S)
            gate_log = _gate_log(env, UP_TIMEOUT_S)
            subprocess.run([*compose, "--no-deps", "console"], cwd=REPO, env=env, check=True, timeout=120)
        yield env, port, gate_log
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


def test_stack_serves_the_console_and_verifies_its_sandboxes(
    stack: tuple[dict[str, str], int, str],
) -> None:
    env, port, gate_log = stack
    scorer = not gate_log
    base = f"http://127.0.0.1:{port}"
    assert _wait_for(f"{base}/", 60).status_code == 401
    if not scorer:  # the gate times one confined verdict before it serves; unconfined, it never scores
        assert "cannot measure its verdict time" in gate_log and "does not start" in gate_log, gate_log
    with httpx.Client(base_url=base, timeout=10, follow_redirects=True) as person:
        assert person.get("/login", params={"token": TOKEN}).status_code == 200
        audit = person.get("/audit").text
        assert "Chain: intact" in audit
        # with a serving gate the chain is checked against its anchor; without one the banner says so
        assert ("no anchor store consulted" in audit) is not scorer
    home = Path(env["SEGFACTORY_STACK_HOME"])
    assert not any((home / "vault").iterdir())  # the real vault is the gate's volume, not this folder
    verify = subprocess.run(
        [
            "docker-compose",
            "run",
            "--rm",
            "--no-deps",  # the sandboxes are the worker's own; verify needs no gate
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
    assert verify.stdout.strip(), verify.stderr[-3000:]
    report = json.loads(verify.stdout.strip().splitlines()[-1])
    checks = {c["name"]: c["ok"] for c in report["checks"]}
    assert report["ok"] and checks["docker_socket"] and checks["canary"], checks


def _gate_log(env: dict[str, str], deadline_s: float = 300) -> str:
    """The gate container's output once it has exited (it initialises the home first)."""
    deadline = time.monotonic() + deadline_s
    while True:
        ps = subprocess.run(
            ["docker-compose", "ps", "-q", "gate"], cwd=REPO, env=env, capture_output=True, text=True
        )
        container = ps.stdout.strip()
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", container], capture_output=True, text=True
        )
        if container and state.stdout.strip() == "false":
            logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
            return logs.stdout + logs.stderr
        assert time.monotonic() < deadline, "the gate neither served nor exited"
        time.sleep(2)
