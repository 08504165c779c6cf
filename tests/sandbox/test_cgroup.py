"""Whole-sandbox limits for bwrap: a cgroup per run (v1 or a delegated v2 subtree), or no sandbox.

Memory limited per process (RLIMIT_DATA) lets forked processes add up past the limit, so a bwrap
sandbox without a run cgroup is refused unless the user opts out by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox import SandboxSpec, get_backend
from sandbox import _cgroup as cgroup_mod
from sandbox._cgroup import MEMORY_ENV, PER_PROCESS
from sandbox._cgroup2 import PARENT_ENV, _mounts, _words
from segfactory.errors import SandboxError
from tests.conftest import CliResult
from tests.sandbox.conftest import small_limits
from tests.sandbox.test_redteam import FORK_BOMB_MEMORY

# serial: the delegation test hands the host's sandbox cgroup parents to another user and back,
# which would take them from a dropped run of another worker
pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.serial,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
REFUSED = "refusing to start a bwrap sandbox without a whole-sandbox memory limit"


def _cgroup2_without(controller: str) -> Path | None:
    return next((m for m in _mounts() if controller not in _words(m / "cgroup.controllers")), None)


def _cgroup2_with(*controllers: str) -> Path | None:
    return next(
        (
            m
            for m in _mounts()
            if set(controllers) <= _words(m / "cgroup.controllers") and os.access(m, os.W_OK)
        ),
        None,
    )


def test_a_cgroup2_parent_without_memory_is_refused(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """Through the real command: a named cgroup2 parent that cannot limit memory (on a hybrid host
    the memory controller belongs to v1), or one that does not exist, starts nothing."""
    parents = [tmp_path / "no-such-cgroup"]
    if (bare := _cgroup2_without("memory")) is not None:
        parents.append(bare)
    for parent in parents:
        env = {
            **os.environ,
            PARENT_ENV: str(parent),
            MEMORY_ENV: PER_PROCESS,
        }  # a named parent is never waived
        result = cli(
            "sandbox",
            "exec",
            "--backend",
            "bwrap",
            "--home",
            str(tmp_path / "h"),
            "--",
            "sh",
            "-c",
            "echo STARTED",
            env=env,
            timeout=60,
        )
        assert result.returncode != 0 and "STARTED" not in result.stdout, result
        assert REFUSED in result.stderr and str(parent) in result.stderr


@pytest.fixture
def no_cgroup_v1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This host as one without cgroup v1 (the v1 root moved to an empty dir); cgroup v2 is as it is."""
    monkeypatch.setattr(cgroup_mod, "CGROUP_V1", tmp_path / "no-cgroup-v1")
    monkeypatch.delenv(PARENT_ENV, raising=False)
    monkeypatch.delenv(MEMORY_ENV, raising=False)


def test_without_a_run_cgroup_a_sandbox_starts_only_on_the_named_opt_out(
    no_cgroup_v1: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox._cgroup2 import find_parent

    if find_parent()[0] is not None:
        pytest.skip("this process sits in a delegated cgroup2 subtree: a run cgroup is always available")
    backend = get_backend("bwrap")
    spec = SandboxSpec(command=["sh", "-c", "echo STARTED"], workspace=tmp_path, timeout_s=30)
    with pytest.raises(SandboxError, match=REFUSED):
        backend.run(spec)
    monkeypatch.setenv(MEMORY_ENV, PER_PROCESS)
    result = backend.run(spec)
    assert result.stdout.data == b"STARTED\n" and backend.limit_evidence()["kind"] == "rlimit"
    report = backend.verify(tmp_path / "nohome")
    limits = next(c for c in report.checks if c.name == "limits")
    assert not report.ok and not limits.ok and limits.detail["whole_sandbox_memory"] is False


@contextlib.contextmanager
def _delegated_v2() -> Iterator[Path]:
    """A fresh cgroup2 parent with memory and pids enabled for its children (root of a v2 host)."""
    mount = _cgroup2_with("memory", "pids")
    if mount is None:
        pytest.skip(
            "no writable cgroup2 hierarchy with the memory and pids controllers on this host "
            "(on a hybrid host they are bound to cgroup v1)"
        )
    enabled = _words(mount / "cgroup.subtree_control")
    (mount / "cgroup.subtree_control").write_text(
        " ".join(f"+{c}" for c in ("memory", "pids") if c not in enabled)
    )
    parent = mount / f"segfactory-test-{uuid.uuid4().hex[:8]}"
    parent.mkdir()
    try:
        yield parent
    finally:
        for child in parent.iterdir():
            if child.is_dir():
                child.rmdir()
        parent.rmdir()


@pytest.mark.slow
def test_a_delegated_cgroup2_subtree_limits_the_whole_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _delegated_v2() as parent:
        monkeypatch.setenv(PARENT_ENV, str(parent))
        backend = get_backend("bwrap")
        spec = SandboxSpec(
            command=["python", "-c", FORK_BOMB_MEMORY],
            workspace=tmp_path,
            timeout_s=60,
            limits=small_limits(memory_bytes=256 * 1024**2),
        )
        result = backend.run(spec)
        evidence = backend.limit_evidence()
        assert evidence["kind"] == "cgroup-v2" and evidence["memory"] == str(256 * 1024**2)
        assert result.oom_killed and result.stdout.data.count(b"allocated") < 4, result.stdout.data
        assert [p for p in parent.iterdir() if p.is_dir()] == []  # the run's cgroup is gone


def test_v1_delegation_lets_an_unprivileged_user_make_and_join_a_run_cgroup() -> None:
    """What root does before the orchestrator drops to its user: hand over the v1 parents. The
    user (here the sandbox uid, through setpriv) can then create, limit and join a run cgroup."""
    import subprocess

    from sandbox._cgroup import CGROUP_V1, PARENT, delegate_v1

    if os.geteuid() != 0 or not (CGROUP_V1 / "memory" / "memory.limit_in_bytes").exists():
        pytest.skip("needs root on a cgroup v1 host")
    uid = 10001
    parent = CGROUP_V1 / "memory" / PARENT
    owner = (
        (parent.stat().st_uid, parent.stat().st_gid) if parent.is_dir() else (0, 0)
    )  # a dropped run's, maybe
    child = parent / f"delegated-{uuid.uuid4().hex[:8]}"
    script = (
        f"mkdir {child} && echo 268435456 > {child}/memory.limit_in_bytes && "
        f"echo $$ > {child}/cgroup.procs && cat {child}/memory.limit_in_bytes"
    )
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "sh", "-c", script]
    try:
        delegate_v1(0, 0)
        refused = subprocess.run(as_user, capture_output=True, text=True, timeout=30)
        assert refused.returncode != 0  # not delegated yet: the user may not create it
        delegate_v1(uid, uid)
        done = subprocess.run(as_user, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and done.stdout.strip() == "268435456", done.stderr
    finally:
        delegate_v1(*owner)  # as it was: another command running as segfactory may own them
        deadline = 50
        while child.exists() and deadline:
            with contextlib.suppress(OSError):
                child.rmdir()
            deadline -= 1
            time.sleep(0.02)
    assert all((CGROUP_V1 / c / PARENT).stat().st_uid == owner[0] for c in ("memory", "pids", "cpu"))
