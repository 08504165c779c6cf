"""Started as root, a command that runs agents' work continues as the unprivileged ``segfactory`` user.

Root only prepares: the home root is kept root's and the orchestrator's own parts are given to
``segfactory`` (``gate.users.give_home_to_orchestrator``, a walk that follows no link), the gate
is served as ``segfactory-gate`` on the home's socket when nothing serves there yet (started
``python -I`` from ``/``: root imports nothing from its current directory), and then the same
command is started again as ``segfactory`` (``gate.users.user_launcher``: a private mount
namespace makes the runtime reachable, setpriv drops every capability). The root process only
waits for it, passes SIGTERM, SIGINT and SIGHUP on to it, stops the gate it started and passes
the exit code on; the re-started command dies with it (``segfactory.handover``). Root hands it
the gate's host credential over a pipe (the file is the gate user's alone) and a ticket identity,
so that its sandboxes run as the sandbox uid, never as ``segfactory``. The re-started command is
not root, so it runs in place.

This applies only where the users are separated (``init`` as root gave the vault to
``segfactory-gate``); otherwise the command runs as it was started.

``run``, ``aa`` and ``compare`` (``drop_for_agents``) also verify the sandbox as root first:
``sandbox verify`` plants its canary in the vault, which ``segfactory`` cannot write, and the
re-started command is told so (``gate.users.VERIFIED_ENV``) instead of verifying again. Root gives
``segfactory`` the sandbox cgroup parents too, so its sandboxes keep their whole-sandbox limits.
With the docker backend the re-started command gets the docker socket's group for its own process
tree only (``/etc/group`` is not changed); its containers run as the sandbox uid, in workspaces it
gives to that uid for the ticket and takes back afterwards (``sandbox._identity``). The socket is
root-equivalent: with docker, the drop keeps host code from opening the vault by mistake, not a
compromised orchestrator from reaching it. A socket only root's group may use cannot be shared
that way; then the command keeps root and says why.
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
from gate.client import SERVED_SOCKET, GateClient, host_credential, wait_ready
from sandbox import delegate_v1, engine_address, load_policy
from segfactory.errors import GateError, HomeError
from segfactory.handover import PARENT_ENV, TICKET_USERNS_ENV, hand_over, ticket_userns
from segfactory.home import Home
from segfactory.privilege import SAFE_CWD, SOURCE_TREE, isolated_python

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
    # isolated and from "/": root imports nothing from its current directory (which may be the home)
    proc = subprocess.Popen(
        isolated_python(SOURCE_TREE, "segfactory", "gate", "serve", "--home", str(home.root)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=SAFE_CWD,
        env={**os.environ, PARENT_ENV: str(os.getpid())},  # it dies with this process
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
    caller then runs the command itself).

    The restarted command gets what ``segfactory.handover`` describes: it dies with this process,
    the gate's host credential over a pipe, and a ticket identity for its sandboxes. SIGTERM,
    SIGINT and SIGHUP sent to this process are passed on to it."""
    if not should_drop(home):
        return None
    users.give_home_to_orchestrator(home.root)
    with (
        tempfile.TemporaryDirectory(prefix="segfactory-user-") as scratch,
        _readable_source(Path(__file__).resolve().parents[1]) as repo,
        _served_gate(home),
        _handed_over(home) as (fds, handed_env),
    ):
        os.chown(scratch, *_ids(users.ORCHESTRATOR_USER))
        env = {
            **os.environ,
            "HOME": scratch,
            "XDG_CACHE_HOME": scratch,
            "MPLCONFIGDIR": scratch,
            PARENT_ENV: str(os.getpid()),
            **handed_env,
            **(env or {}),
        }
        launcher = users.user_launcher(
            [Path(sys.base_prefix), Path(sys.prefix), repo, home.root, Path(scratch)],
            users.ORCHESTRATOR_USER,
            extra_groups,
        )
        # -I and "/": the restarted command imports this very source tree (or its staged copy),
        # never its current directory nor whatever tree the interpreter's editable install names;
        # unbuffered, so that its output reaches a pipe (a supervisor, a test) as it is written
        args = _with_home(sys.argv[1:], home.root)
        argv = [*launcher, *isolated_python(repo, "segfactory", *args, unbuffered=True)]
        sys.stderr.write(f"continuing as {users.ORCHESTRATOR_USER} after set-up\n")
        child = subprocess.Popen(argv, env=env, cwd=SAFE_CWD, pass_fds=fds)
        with _forwarding_signals(child):
            return _exit_code(child.wait())


FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # passed on to the restarted command


@contextmanager
def _forwarding_signals(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the restarted command runs, a signal of ``FORWARDED`` sent to this process goes to it
    (it decides how to stop; this process waits for it), unless this process ignores it. On the
    way out it is stopped if needed."""
    # a signal this process ignores (a command started under nohup ignores SIGHUP) stays ignored:
    # the child inherited the same, and would not act on it anyway
    passed_on = [sig for sig in FORWARDED if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, lambda sig, _: child.send_signal(sig)) for sig in passed_on}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.terminate()
            _reap(child)


def _exit_code(returncode: int) -> int:
    """The restarted command's exit status as a shell reports it (a signal N is 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


@contextmanager
def _handed_over(home: Home) -> Iterator[tuple[tuple[int, ...], dict[str, str]]]:
    """The descriptors the restarted command inherits and the environment that names them: the
    served gate's host credential (a pipe) and the ticket identity (a user namespace)."""
    secrets_fd, env = hand_over(host_credential(home.root / users.GATE_RUN))
    try:
        with ticket_identity() as (identity, identity_env):
            yield (secrets_fd, identity), {**env, **identity_env}
    finally:
        os.close(secrets_fd)


@contextmanager
def ticket_identity() -> Iterator[tuple[int, dict[str, str]]]:
    """As root: the ticket identity for ``segfactory`` (``segfactory.handover.ticket_userns``, with
    the sandbox policy's uid) and the environment entry that names it; closed on exit."""
    policy = load_policy()
    try:
        identity = ticket_userns(_ids(users.ORCHESTRATOR_USER), (policy.uid, policy.gid))
    except (OSError, ValueError) as exc:
        raise HomeError(
            f"cannot make the ticket identity (sandbox uid {policy.uid}) for {users.ORCHESTRATOR_USER}: "
            f"{exc}; tickets never run as the orchestrator's own uid"
        ) from None
    try:
        yield identity, {TICKET_USERNS_ENV: str(identity)}
    finally:
        os.close(identity)


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
