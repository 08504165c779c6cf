"""The commands that run agents' work (run, aa, compare, sweep) continue as ``segfactory`` when
started as root on a home with separated users; the set-up before the drop, and the docker case
(the socket's group for the dropped process tree, containers as its own uid)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cli import _common, _drop, agents_cmds, controls_cmds, main


def test_every_agent_command_continues_unprivileged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = SimpleNamespace(root=tmp_path, info=lambda: {"profile": "demo"})
    asked: list[str] = []

    def dropped(h: Any, backend: str, progress: Any) -> int:
        asked.append(backend)
        return 7  # the re-started command's exit code; nothing else may run here

    monkeypatch.setattr(_drop, "drop_for_agents", dropped)
    monkeypatch.setattr(agents_cmds, "home_for", lambda *a, **k: home)
    monkeypatch.setattr(controls_cmds, "home_for", lambda *a, **k: home)
    monkeypatch.setattr(_common, "home_for", lambda *a, **k: home)  # the sweep's, after its validation
    for argv in (
        ["run", "--budget", "10s"],
        ["aa", "--runs", "1"],
        ["compare", "--budget", "3m"],
        ["sweep", "--budget", "3m"],
    ):
        assert main([*argv, "--backend", "bwrap"]) == 7, argv
    assert asked == ["bwrap"] * 4


def test_the_drop_verifies_as_root_then_restarts_with_the_receipt(monkeypatch: pytest.MonkeyPatch) -> None:
    import agents.run
    from gate import users

    calls: list[Any] = []
    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(
        agents.run, "verify_sandbox", lambda backend, home, progress: calls.append(("verify", backend))
    )
    monkeypatch.setattr(_drop, "delegate_v1", lambda uid, gid: calls.append(("delegate", uid)))
    monkeypatch.setattr(_drop, "_ids", lambda user: (999, 995))
    monkeypatch.setattr(
        _drop,
        "rerun_as_orchestrator",
        lambda home, env=None, extra_groups=(): calls.append(("rerun", env, extra_groups)) or 0,
    )
    assert _drop.drop_for_agents(SimpleNamespace(), "bwrap", lambda line: None) == 0
    assert calls == [("verify", "bwrap"), ("delegate", 999), ("rerun", {users.VERIFIED_ENV: "bwrap"}, ())]


def _socket(tmp_path: Path, gid: int, mode: int) -> str:
    import os
    import socket

    path = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()
    os.chown(path, -1, gid) if os.geteuid() == 0 else None
    os.chmod(path, mode)
    return str(path)


def test_the_docker_backend_drops_with_the_sockets_group_for_that_process_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os

    import agents.run
    from gate import users

    gid = os.getgid() or 4242  # any group but root's
    monkeypatch.setenv("DOCKER_HOST", "unix://" + _socket(tmp_path, gid, 0o660))
    calls: list[Any] = []
    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(
        agents.run, "verify_sandbox", lambda backend, home, progress: calls.append(("verify", backend))
    )
    monkeypatch.setattr(_drop, "delegate_v1", lambda uid, gid: pytest.fail("docker has its own cgroups"))
    monkeypatch.setattr(
        _drop,
        "rerun_as_orchestrator",
        lambda home, env=None, extra_groups=(): calls.append(("rerun", env, extra_groups)) or 0,
    )
    assert _drop.drop_for_agents(SimpleNamespace(), "docker", lambda line: None) == 0
    assert calls == [("verify", "docker"), ("rerun", {users.VERIFIED_ENV: "docker"}, (gid,))]


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="giving the socket root's group needs root")
@pytest.mark.parametrize("mode", [0o660, 0o600])
def test_a_docker_socket_only_root_can_use_keeps_root_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: int
) -> None:
    socket = _socket(tmp_path, 0 if mode == 0o660 else 4242, mode)
    monkeypatch.setenv("DOCKER_HOST", "unix://" + socket)
    lines: list[str] = []
    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(
        _drop, "rerun_as_orchestrator", lambda *a, **k: pytest.fail("sharing this socket is root's")
    )
    assert _drop.drop_for_agents(SimpleNamespace(), "docker", lines.append) is None
    assert lines == [f"note: {_drop.docker_keeps_root(socket)}"]


def test_an_engine_over_tcp_needs_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert _drop.docker_socket_groups() == ("tcp://127.0.0.1:2375", ())


@pytest.mark.root
@pytest.mark.docker
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="starting a process as segfactory needs root")
def test_as_segfactory_with_the_sockets_group_a_docker_sandbox_writes_its_own_workspace(
    tmp_path: Path,
) -> None:
    """What the dropped command does: a real container started by ``segfactory`` holding only the
    socket's group (as the launcher gives it), running as segfactory's uid in the workspace it owns.
    Without the group the engine refuses it."""
    import os
    import pwd
    import subprocess
    import sys

    from gate import users
    from tests.conftest import REPO
    from tests.sandbox.conftest import docker_problem

    if not users.user_exists(users.ORCHESTRATOR_USER):
        pytest.skip("no segfactory user (created by `segfactory init` as root)")
    if problem := docker_problem():
        pytest.skip(f"no Docker engine could be started: {problem}")
    socket, groups = _drop.docker_socket_groups()
    if not groups:
        pytest.skip(f"the engine's socket {socket} is not shared through a group")
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    os.chmod(tmp_path, 0o755)  # pytest makes it 0700; its private parents are bridged by the launcher
    scratch, workspace = tmp_path / "home", tmp_path / "ws"
    for folder in (scratch, workspace):
        folder.mkdir()
        os.chown(folder, me.pw_uid, me.pw_gid)
    script = (
        "import sys; from pathlib import Path; from sandbox import get_backend; "
        "from sandbox import SandboxSpec; from segfactory.errors import SandboxError\n"
        "try:\n"
        f"    r = get_backend('docker').run(SandboxSpec(command=['sh', '-c', 'id -u > /work/uid'], "
        f"workspace=Path({str(workspace)!r}), timeout_s=60))\n"
        "except SandboxError as exc:\n"
        "    sys.exit(f'refused: {exc}')\n"
        "sys.exit(r.exit_code)"
    )
    with _drop._readable_source(REPO) as source:
        env = {**os.environ, "HOME": str(scratch), "XDG_CACHE_HOME": str(scratch), "PYTHONPATH": str(source)}
        paths = [Path(sys.base_prefix), Path(sys.prefix), source, tmp_path]

        def as_segfactory(extra: tuple[int, ...]) -> subprocess.CompletedProcess[str]:
            launcher = users.user_launcher(paths, users.ORCHESTRATOR_USER, extra)
            return subprocess.run(
                [*launcher, sys.executable, "-c", script],
                env=env,
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=300,
            )

        refused = as_segfactory(())
        assert refused.returncode != 0 and "refused: the Docker engine does not answer" in refused.stderr
        assert not (workspace / "uid").exists()
        ran = as_segfactory(groups)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert (workspace / "uid").read_text().strip() == str(me.pw_uid)
    assert (workspace / "uid").stat().st_uid == me.pw_uid
    assert "docker" not in {
        g.gr_name for g in __import__("grp").getgrall() if users.ORCHESTRATOR_USER in g.gr_mem
    }


def test_only_a_dropped_process_skips_the_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    from gate import users

    monkeypatch.setenv(users.VERIFIED_ENV, "bwrap")
    monkeypatch.setattr(users.os, "geteuid", lambda: 0)
    assert not users.verified_before_drop("bwrap")  # root always verifies itself
    monkeypatch.setattr(users.os, "geteuid", lambda: 999)
    assert users.verified_before_drop("bwrap") and not users.verified_before_drop("docker")


def test_the_restarted_command_imports_this_source_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import contextlib
    import os

    from gate import users

    seen: dict[str, Any] = {}

    class Child:
        def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
            first = Path(env["PYTHONPATH"].split(os.pathsep)[0])  # the tree itself, or its staged copy
            seen.update(argv=argv, env=env, source=(first / "cli" / "_drop.py").read_text())

        def wait(self) -> int:
            return 0

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(users, "give_home_to_orchestrator", lambda root: None)
    monkeypatch.setattr(users, "user_launcher", lambda paths, user, extra_groups=(): ["launch"])
    monkeypatch.setattr(_drop, "_served_gate", lambda home: contextlib.nullcontext())
    monkeypatch.setattr(_drop, "_ids", lambda user: (os.getuid(), os.getgid()))
    monkeypatch.setattr(_drop.subprocess, "Popen", Child)
    assert _drop.rerun_as_orchestrator(SimpleNamespace(root=tmp_path), env={"X": "1"}) == 0
    assert seen["source"] == Path(_drop.__file__).read_text() and seen["env"]["X"] == "1"
    assert seen["argv"][:4] == ["launch", _drop.sys.executable, "-m", "segfactory"]


def test_a_private_checkout_is_staged_readable_for_the_restarted_command(tmp_path: Path) -> None:
    import os
    import stat

    repo = tmp_path / "checkout"
    for rel in (
        "cli/__init__.py",
        "policies/win_rule.yaml",
        "tests/test_x.py",
        ".venv/bin/python",
        "README.md",
    ):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x")
    os.chmod(repo, 0o755)
    with _drop._readable_source(repo) as source:
        assert source == repo  # others may enter it: used in place
    os.chmod(repo, 0o700)  # a `mktemp -d` checkout: a bind mount would keep this mode
    with _drop._readable_source(repo) as source:
        assert source != repo and stat.S_IMODE(source.stat().st_mode) == 0o755
        assert sorted(p.name for p in source.iterdir()) == ["README.md", "cli", "policies"]
    assert not source.exists()  # removed when the command ends
