"""Trust rule 1 as root: the vault belongs to segfactory-gate; segfactory gets EACCES everywhere."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate import users
from gate.client import running_gate
from tests.gate import models
from tests.gate.conftest import build_home

pytestmark = [
    pytest.mark.root, pytest.mark.slow, pytest.mark.bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="user separation needs root (root bypasses modes)"),
]


@pytest.fixture(scope="module")
def separated_home() -> Iterator[Path]:
    users.ensure_users()
    base = Path(tempfile.mkdtemp(prefix="sf-users-"))
    os.chmod(base, 0o755)  # a home others may traverse, like /var/lib/segfactory
    home, _ = build_home(base / "home", separate_users=True)
    yield home
    shutil.rmtree(base, ignore_errors=True)


def test_vault_belongs_to_the_gate_user(separated_home: Path) -> None:
    vault = separated_home / "vault"
    gate_uid = pwd.getpwnam(users.GATE_USER).pw_uid
    assert vault.stat().st_uid == gate_uid and (vault.stat().st_mode & 0o777) == 0o700
    assert all(p.lstat().st_uid == gate_uid for p in vault.rglob("*"))


def test_orchestrator_user_gets_eacces_on_every_vault_file(separated_home: Path) -> None:
    files = [str(p) for p in (separated_home / "vault").rglob("*") if p.is_file()]
    assert len(files) > 10
    script = "for f; do if cat \"$f\" >/dev/null 2>/tmp/sf-err-$$; then echo READ; else cat /tmp/sf-err-$$; fi; done"
    out = subprocess.run(
        ["setpriv", f"--reuid={users.ORCHESTRATOR_USER}", f"--regid={users.GROUP}", "--init-groups",
         "sh", "-c", script, "sh", *files],
        capture_output=True, text=True, timeout=60, cwd="/",
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(files) and all("Permission denied" in line for line in lines), out.stdout[:500]


def test_gate_serves_as_its_own_user_without_opening_root(separated_home: Path, tmp_path: Path) -> None:
    root_mode = os.stat("/root").st_mode
    model = models.save(models.threshold_model(bias=-0.45), tmp_path / "m.onnx")
    with running_gate(separated_home, ["--answer-time", "0"]) as client:
        status_line = next(line for line in Path(f"/proc/{client.server_pid}/status").read_text().splitlines()
                           if line.startswith("Uid:"))
        assert int(status_line.split()[1]) == pwd.getpwnam(users.GATE_USER).pw_uid
        assert client.status()["pinned_code_ok"] is True
        assert client.submit(model, None, "as-gate-user").verdict.value == "WIN"
    assert os.stat("/root").st_mode == root_mode
