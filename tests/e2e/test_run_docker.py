"""End to end with the docker backend, started as root on a home with separated users: ``segfactory
run --backend docker`` verifies the sandbox as root, then continues as ``segfactory`` holding the
docker socket's group for its own process tree only, and its ticket trains in a container that
runs as ``segfactory``'s uid in the workspace ``segfactory`` owns.

One ticket (a 10-second device budget), through the real CLI, the real Docker engine and the
real gate: the path a person takes with ``sudo segfactory run --backend docker``.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="user separation needs root")]


@pytest.fixture(scope="module")
def docker_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from segfactory.cli import _drop
    from tests.conftest import REPO
    from tests.sandbox.conftest import docker_problem

    if problem := docker_problem():
        pytest.skip(f"no Docker engine could be started: {problem}")
    socket, groups = _drop.docker_socket_groups()
    if not groups:
        pytest.skip(f"the engine's socket {socket} is not shared through a group (then the run keeps root)")
    home = tmp_path_factory.mktemp("e2e-docker") / "home"
    env = {k: v for k, v in os.environ.items() if k != "SEGFACTORY_NO_USER_SEPARATION"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "segfactory", *args, "--home", str(home)], capture_output=True,
                              text=True, timeout=900, cwd=REPO, env=env)

    init = cli("init", "--profile", "demo")
    assert init.returncode == 0, init.stderr
    run = cli("run", "--profile", "demo", "--backend", "docker", "--budget", "10s", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    return {"home": home, "summary": json.loads(run.stdout), "stderr": run.stderr}


def test_root_verifies_docker_then_the_run_continues_as_segfactory(docker_run: dict[str, Any]) -> None:
    from gate import users

    home, stderr, run_id = docker_run["home"], docker_run["stderr"], docker_run["summary"]["run_id"]
    assert users.vault_is_separated(home / "vault")
    assert "sandbox verify (docker): ok," in stderr  # root's verify, with its canary in the vault
    assert "continuing as segfactory after set-up" in stderr
    assert "sandbox verify (docker): ok, as root before continuing as this user" in stderr
    assert "keeps root" not in stderr
    record = json.loads((home / "runs" / run_id / "run.json").read_text())
    assert record["user"] == users.ORCHESTRATOR_USER and record["backend"] == "docker"
    # the group was the process tree's, not the user's
    assert users.ORCHESTRATOR_USER not in grp.getgrgid(os.stat(_socket()).st_gid).gr_mem


def test_the_ticket_trained_in_a_container_as_segfactory(docker_run: dict[str, Any]) -> None:
    from gate import users

    home, summary = docker_run["home"], docker_run["summary"]
    assert summary["tickets_run"] >= 1
    uid = pwd.getpwnam(users.ORCHESTRATOR_USER).pw_uid
    ticket = home / "runs" / summary["run_id"] / "tickets" / f"{summary['run_id']}-t001"
    outcome = json.loads((ticket / "outcome.json").read_text())
    assert outcome["status"] == "DONE" and outcome["attempts"][0]["exit_code"] == 0, outcome
    assert (ticket / "model.onnx").is_file()
    log = [json.loads(line) for line in (home / "audit" / "log.jsonl").read_text().splitlines()]
    started = [r["payload"] for r in log if r["event"] == "ticket_started" and r["payload"]["ticket_id"] == ticket.name]
    assert [p["backend"] for p in started] == ["docker"]
    written = [p for p in (home / "runs" / summary["run_id"]).rglob("*") if p.is_file()]
    assert written and {p.stat().st_uid for p in written} == {uid}  # the container wrote as segfactory too


def _socket() -> str:
    from segfactory.cli import _drop

    return _drop.docker_socket_groups()[0]
