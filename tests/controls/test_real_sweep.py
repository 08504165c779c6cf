"""One real sweep trial end to end: ``segfactory init`` then ``segfactory sweep --max-trials 1``.

The real sandbox trains the default config (trial 0, enqueued), the host computes its dev score,
the study lands in the home's ``optuna.db``, and the audit log shows the sandbox run.

As root (as CI runs) with a Docker engine whose socket is shared through a group, the home
separates the users and the sweep runs with ``--backend docker``: the path a person takes with
``sudo segfactory sweep --backend docker``. Root verifies the sandbox, then the command continues
as ``segfactory`` holding the socket's group for its own process tree only, and the trial trains
in a container that runs as ``segfactory``'s uid in the workspace ``segfactory`` owns. Otherwise
the sweep runs with bwrap on a home with a root-owned vault (``SEGFACTORY_NO_USER_SEPARATION=1``).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def _docker_drop_possible() -> str | None:
    """Why the sweep cannot take the docker path here (None: it can)."""
    from cli import _drop
    from tests.sandbox.conftest import docker_problem

    if os.geteuid() != 0:
        return "user separation needs root"
    if problem := docker_problem():
        return f"no Docker engine could be started: {problem}"
    socket, groups = _drop.docker_socket_groups()
    return (
        None
        if groups
        else f"the engine's socket {socket} is not shared through a group (the sweep keeps root)"
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("sweep") / "home"
    why_not = _docker_drop_possible()
    backend = "bwrap" if why_not else "docker"
    env = {k: v for k, v in os.environ.items() if k != "SEGFACTORY_NO_USER_SEPARATION"}
    if why_not:
        env["SEGFACTORY_NO_USER_SEPARATION"] = "1"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "segfactory", *args, "--home", str(home)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=REPO,
            env=env,
        )

    init = cli("init", "--profile", "demo")
    assert init.returncode == 0, init.stderr[-3000:]
    result = cli(
        "sweep",
        "--sampler",
        "random",
        "--budget",
        "2m",
        "--seed",
        "3",
        "--max-trials",
        "1",
        "--backend",
        backend,
        "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        "home": home,
        "backend": backend,
        "why_not_docker": why_not,
        "summary": json.loads(result.stdout),
        "stderr": result.stderr,
    }


def test_a_real_sweep_trial_is_the_default_config(sweep: dict[str, Any]) -> None:
    import optuna

    home, summary = sweep["home"], sweep["summary"]
    assert summary["trials"] == 1 and summary["failed"] == 0 and summary["device_seconds"] > 0
    assert 0.0 <= summary["best_dev_score"] <= 1.0
    base = yaml.safe_load((REPO / "configs" / "run-demo.yaml").read_text())
    assert summary["best_params"]["optim.lr"] == base["optim"]["lr"]
    assert summary["best_params"]["batch_size"] == base["batch_size"]
    study = optuna.load_study(study_name=summary["study_name"], storage=f"sqlite:///{home / 'optuna.db'}")
    assert study.trials[0].value == pytest.approx(summary["best_dev_score"])
    people = home / "runs" / summary["run_id"] / "people"
    row = json.loads((people / "sweep.jsonl").read_text().splitlines()[0])
    assert row["ticket_id"].endswith("-t000")
    log = [json.loads(line) for line in (home / "audit" / "log.jsonl").read_text().splitlines()]
    attempts = [r for r in log if r["run_id"] == summary["run_id"] and r["event"] == "ticket_attempt"]
    assert len(attempts) == 1 + (1 if row["replicate_id"] else 0)
    started = [
        r["payload"]
        for r in log
        if r["event"] == "ticket_started" and r["payload"]["ticket_id"] == row["ticket_id"]
    ]
    assert [p["backend"] for p in started] == [sweep["backend"]]
    outcome = json.loads(
        (home / "runs" / summary["run_id"] / "tickets" / row["ticket_id"] / "outcome.json").read_text()
    )
    assert outcome["evidence"]["dev_metrics"]["object_f1"] == pytest.approx(summary["best_dev_score"])


@pytest.mark.docker
@pytest.mark.root
def test_started_as_root_with_docker_the_sweep_continues_as_segfactory(sweep: dict[str, Any]) -> None:
    from cli import _drop
    from gate import users

    if sweep["why_not_docker"]:
        pytest.skip(sweep["why_not_docker"])
    home, stderr, run_id = sweep["home"], sweep["stderr"], sweep["summary"]["run_id"]
    assert users.vault_is_separated(home / "vault")
    assert "sandbox verify (docker): ok," in stderr  # root's verify, with its canary in the vault
    assert "continuing as segfactory after set-up" in stderr
    assert "sandbox verify (docker): ok, as root before continuing as this user" in stderr
    assert "keeps root" not in stderr
    assert json.loads((home / "runs" / run_id / "run.json").read_text())["user"] == users.ORCHESTRATOR_USER
    uid = pwd.getpwnam(users.ORCHESTRATOR_USER).pw_uid
    written = [p for p in (home / "runs" / run_id).rglob("*") if p.is_file()]
    assert written and {p.stat().st_uid for p in written} == {uid}  # the container wrote as segfactory too
    socket_group = grp.getgrgid(os.stat(_drop.docker_socket_groups()[0]).st_gid)
    assert (
        users.ORCHESTRATOR_USER not in socket_group.gr_mem
    )  # the group was the process tree's, not the user's
