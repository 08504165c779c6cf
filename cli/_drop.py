"""Started as root, a command that runs agents' work continues as the unprivileged ``segfactory`` user.

Root only prepares: the home's writable parts are given to ``segfactory``
(``gate.users.give_home_to_orchestrator``), the gate is served as ``segfactory-gate`` on the
home's socket when nothing serves there yet, and then the same command is started again as
``segfactory`` (``gate.users.user_launcher``: a private mount namespace makes the runtime
reachable, setpriv drops every capability). The root process only waits for it, stops the gate
it started and passes the exit code on. The re-started command is not root, so it runs in place.

This applies only where the users are separated (``init`` as root gave the vault to
``segfactory-gate``); otherwise the command runs as it was started.

``run``, ``aa`` and ``compare`` (``drop_for_agents``) also verify the sandbox as root first:
``sandbox verify`` plants its canary in the vault, which ``segfactory`` cannot write, and the
re-started command is told so (``gate.users.VERIFIED_ENV``) instead of verifying again. Root gives
``segfactory`` the sandbox cgroup parents too, so its sandboxes keep their whole-sandbox limits.
With the docker backend the re-started command gets the docker socket's group for its own process
tree only (``/etc/group`` is not changed) and its containers run as its own uid, so they can
write the workspaces it owns. The socket is root-equivalent: with docker, the drop keeps host code
from opening the vault by mistake, not a compromised orchestrator from reaching it. A socket only
root's group may use cannot be shared that way; then the command keeps root and says why.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gate import users
from gate.client import SERVED_SOCKET, GateClient, wait_ready
from sandbox import delegate_v1, engine_address
from segfactory.errors import GateError
from segfactory.home import Home

GATE_START_S = 60.0  # time for the served gate to answer; past this: HomeError


def docker_keeps_root(socket: str) -> str:
    return (
        f"the docker socket {socket} can be used only by root (its group is root, or the group may not "
        "read and write it), so this command keeps root after set-up; start dockerd with a group of "
        "its own (`dockerd -G docker`) or use --backend bwrap to run it as segfactory"
    )


def should_drop(home: Home) -> bool:
    return users.is_root() and users.vault_is_separated(home.vault)


@contextmanager
def _served_gate(home: Home) -> Iterator[None]:
    """The home's gate on ``<home>/gate-run/gate.sock`` for the command's duration (unless one serves)."""
    sock = home.root / SERVED_SOCKET
    probe = GateClient(socket_path=sock)
    try:
        probe.status()
        yield  # a person already serves it
        return
    except GateError:
        pass
    finally:
        probe.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "segfactory", "gate", "serve", "--home", str(home.root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    client = GateClient(socket_path=sock)
    try:
        wait_ready(client, proc, GATE_START_S)
        yield
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drop_for_agents(home: Home, backend: str, progress: Any) -> int | None:
    """``run``, ``aa``, ``compare`` as root with separated users: verify the sandbox, delegate its
    cgroups, then continue as ``segfactory``; the exit code. None: run the command in place."""
    if not should_drop(home):
        return None
    groups: tuple[int, ...] = ()
    if backend == "docker":
        socket, granted = docker_socket_groups()
        if granted is None:
            progress(f"note: {docker_keeps_root(socket)}")
            return None
        groups = granted
    from agents.run import verify_sandbox  # deferred: loads numba

    verify_sandbox(backend, home, progress)
    if backend == "bwrap":  # docker's containers live in the engine's cgroups
        delegate_v1(*_ids(users.ORCHESTRATOR_USER))
    return rerun_as_orchestrator(home, env={users.VERIFIED_ENV: backend}, extra_groups=groups)


def docker_socket_groups() -> tuple[str, tuple[int, ...] | None]:
    """(the engine's address, the groups ``segfactory`` needs to use it): its unix socket's group
    when that group is not root's and may read and write it; () for an engine reached over TCP,
    where no file permission applies; None when only root can use the socket."""
    host = engine_address()
    if not host.startswith("unix://"):
        return host, ()
    path = host.removeprefix("unix://")
    try:
        info = os.stat(path)
    except OSError:
        return path, None  # verify_sandbox would fail on it anyway; keep the old behaviour and say why
    if info.st_gid == 0 or info.st_mode & 0o060 != 0o060:
        return path, None
    return path, (info.st_gid,)


def continue_unprivileged(home: Home, backend: str, progress: Any) -> None:
    """For a command's body: after a drop (``drop_for_agents``) this process exits with the
    re-started command's code; otherwise it returns and the command runs in place."""
    import typer

    code = drop_for_agents(home, backend, progress)
    if code is not None:
        raise typer.Exit(code)


def rerun_as_orchestrator(
    home: Home, env: dict[str, str] | None = None, extra_groups: tuple[int, ...] = ()
) -> int | None:
    """As root with separated users: run this command again as ``segfactory`` (with ``env`` added,
    and ``extra_groups`` for its process tree); its exit code. None when no drop applies (the
    caller then runs the command itself)."""
    if not should_drop(home):
        return None
    users.give_home_to_orchestrator(home.root)
    with (
        tempfile.TemporaryDirectory(prefix="segfactory-user-") as scratch,
        _readable_source(Path(__file__).resolve().parents[1]) as repo,
        _served_gate(home),
    ):
        os.chown(scratch, *_ids(users.ORCHESTRATOR_USER))
        # unbuffered: the re-started command's output reaches a pipe (a supervisor, a test) as it is written
        # PYTHONPATH: the re-started command imports this very source tree, not whatever tree the
        # interpreter's editable install points at (the child starts elsewhere, from ``scratch``)
        path = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p)
        env = {
            **os.environ,
            "HOME": scratch,
            "XDG_CACHE_HOME": scratch,
            "MPLCONFIGDIR": scratch,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": path,
            **(env or {}),
        }
        launcher = users.user_launcher(
            [Path(sys.base_prefix), Path(sys.prefix), repo, home.root, Path(scratch)],
            users.ORCHESTRATOR_USER,
            extra_groups,
        )
        argv = [*launcher, sys.executable, "-m", "segfactory", *_with_home(sys.argv[1:], home.root)]
        sys.stderr.write(f"continuing as {users.ORCHESTRATOR_USER} after set-up\n")
        child = subprocess.Popen(argv, env=env, cwd=scratch)
        previous = signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
        try:
            return child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
            if child.poll() is None:
                child.terminate()
                _reap(child)


SOURCE_SKIP = ("tests", "docs", "benchmarks", "test-artifacts")  # not needed to run a command


@contextmanager
def _readable_source(repo: Path) -> Iterator[Path]:
    """The source tree ``segfactory`` can read: ``repo`` itself when others may enter and list it
    (private parents are bridged by the launcher's mount namespace), else a root-owned read-only
    copy of what a command needs (a checkout in a ``mktemp -d`` folder is mode 0700, and a bind
    mount keeps that mode)."""
    if repo.stat().st_mode & 0o005 == 0o005:
        yield repo
        return
    staged = Path(tempfile.mkdtemp(prefix="segfactory-src-"))
    try:
        for entry in repo.iterdir():
            if entry.name.startswith(".") or entry.name in SOURCE_SKIP:
                continue
            if entry.is_dir():
                shutil.copytree(
                    entry, staged / entry.name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy2(entry, staged / entry.name)
        os.chmod(staged, 0o755)
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _with_home(args: list[str], root: Path) -> list[str]:
    """The command's arguments with ``--home`` absolute (the re-started command runs elsewhere)."""
    out, skip = [], False
    for arg in args:
        if skip:
            out.append(str(root))
            skip = False
        elif arg == "--home":
            out.append(arg)
            skip = True
        elif arg.startswith("--home="):
            out.append(f"--home={root}")
        else:
            out.append(arg)
    return (
        out if "--home" in out or any(a.startswith("--home=") for a in out) else [*out, "--home", str(root)]
    )


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def _reap(child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if child.poll() is None:
        child.kill()
        child.wait()
