"""Started as root on a home with separated users, ``segfactory run`` sets up as root and runs its
loop as the unprivileged ``segfactory`` user (trust rule 1): the real CLI, a real demo home made
by ``init`` as root, the real bwrap sandbox and gate.

Root verifies the sandbox (its canary goes into the vault, which ``segfactory`` cannot write),
delegates the sandbox cgroups, serves the gate as ``segfactory-gate`` and re-starts the command
as ``segfactory``; that process runs the ticket and writes the run's records, so they are its.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate import users
from tests.conftest import REPO

pytestmark = [
    pytest.mark.root, pytest.mark.slow, pytest.mark.bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="user separation needs root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


@pytest.fixture
def separated_home() -> Iterator[tuple[Path, dict[str, str]]]:
    base = Path(tempfile.mkdtemp(prefix="sf-drop-"))
    os.chmod(base, 0o755)  # a home others may traverse, like /var/lib/segfactory
    env = {k: v for k, v in os.environ.items() if k != "SEGFACTORY_NO_USER_SEPARATION"}
    home = base / "home"
    init = subprocess.run([sys.executable, "-m", "segfactory", "init", "--profile", "demo", "--home", str(home)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert init.returncode == 0, init.stderr[-2000:]
    assert users.vault_is_separated(home / "vault")
    yield home, env
    shutil.rmtree(base, ignore_errors=True)


def test_run_started_as_root_continues_as_segfactory(separated_home: tuple[Path, dict[str, str]]) -> None:
    home, env = separated_home
    run = subprocess.run([sys.executable, "-m", "segfactory", "run", "--profile", "demo", "--budget", "10s",
                          "--json", "--home", str(home)], capture_output=True, text=True, timeout=900, cwd=REPO,
                         env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "sandbox verify (bwrap): ok," in run.stderr  # root's verify, with the canary in the vault
    assert "continuing as segfactory after set-up" in run.stderr
    assert "as root before continuing as this user" in run.stderr  # the child did not verify again
    summary = json.loads(run.stdout)
    assert summary["tickets_run"] == 1
    record = json.loads((home / "runs" / summary["run_id"] / "run.json").read_text())
    assert record["user"] == users.ORCHESTRATOR_USER
    uid = pwd.getpwnam(users.ORCHESTRATOR_USER).pw_uid
    written = [p for p in (home / "runs" / summary["run_id"]).rglob("*") if p.is_file()]
    assert written and {p.stat().st_uid for p in written} == {uid}  # every record the loop wrote is its own
    assert (home / "vault").stat().st_uid == pwd.getpwnam(users.GATE_USER).pw_uid
