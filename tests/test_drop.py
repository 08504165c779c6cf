"""The commands that run agents' work (run, aa, compare, sweep) continue as ``segfactory`` when
started as root on a home with separated users; the set-up before the drop, and the docker case."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from segfactory.cli import _common, _drop, agents_cmds, controls_cmds, main


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
    for argv in (["run", "--budget", "10s"], ["aa", "--runs", "1"], ["compare", "--budget", "3m"],
                 ["sweep", "--budget", "3m"]):
        assert main([*argv, "--backend", "bwrap"]) == 7, argv
    assert asked == ["bwrap"] * 4


def test_the_drop_verifies_as_root_then_restarts_with_the_receipt(monkeypatch: pytest.MonkeyPatch) -> None:
    import agents.run
    import sandbox._cgroup
    from gate import users

    calls: list[Any] = []
    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(agents.run, "verify_sandbox", lambda backend, home, progress: calls.append(("verify", backend)))
    monkeypatch.setattr(sandbox._cgroup, "delegate_v1", lambda uid, gid: calls.append(("delegate", uid)))
    monkeypatch.setattr(_drop, "_ids", lambda user: (999, 995))
    monkeypatch.setattr(_drop, "rerun_as_orchestrator", lambda home, env=None: calls.append(("rerun", env)) or 0)
    assert _drop.drop_for_agents(SimpleNamespace(), "bwrap", lambda line: None) == 0
    assert calls == [("verify", "bwrap"), ("delegate", 999), ("rerun", {users.VERIFIED_ENV: "bwrap"})]


def test_the_docker_backend_keeps_root_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(_drop, "rerun_as_orchestrator", lambda *a, **k: pytest.fail("docker must not drop"))
    assert _drop.drop_for_agents(SimpleNamespace(), "docker", lines.append) is None
    assert lines == [f"note: {_drop.DOCKER_KEEPS_ROOT}"]


def test_only_a_dropped_process_skips_the_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    from gate import users

    monkeypatch.setenv(users.VERIFIED_ENV, "bwrap")
    monkeypatch.setattr(users.os, "geteuid", lambda: 0)
    assert not users.verified_before_drop("bwrap")  # root always verifies itself
    monkeypatch.setattr(users.os, "geteuid", lambda: 999)
    assert users.verified_before_drop("bwrap") and not users.verified_before_drop("docker")


def test_the_restarted_command_imports_this_source_tree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import contextlib
    import os

    from gate import users

    seen: dict[str, Any] = {}

    class Child:
        def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
            first = Path(env["PYTHONPATH"].split(os.pathsep)[0])  # the tree itself, or its staged copy
            seen.update(argv=argv, env=env, source=(first / "segfactory" / "cli" / "_drop.py").read_text())

        def wait(self) -> int:
            return 0

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(_drop, "should_drop", lambda home: True)
    monkeypatch.setattr(users, "give_home_to_orchestrator", lambda root: None)
    monkeypatch.setattr(users, "user_launcher", lambda paths, user: ["launch"])
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
    for rel in ("segfactory/cli.py", "policies/win_rule.yaml", "tests/test_x.py", ".venv/bin/python", "README.md"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x")
    os.chmod(repo, 0o755)
    with _drop._readable_source(repo) as source:
        assert source == repo  # others may enter it: used in place
    os.chmod(repo, 0o700)  # a `mktemp -d` checkout: a bind mount would keep this mode
    with _drop._readable_source(repo) as source:
        assert source != repo and stat.S_IMODE(source.stat().st_mode) == 0o755
        assert sorted(p.name for p in source.iterdir()) == ["README.md", "policies", "segfactory"]
    assert not source.exists()  # removed when the command ends
