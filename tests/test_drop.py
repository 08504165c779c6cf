"""Started as root on a home with separated users, the commands that run agents' work (run, aa,
compare, sweep) and the console continue as ``segfactory``. Driven for real: the command is
started as root, its restarted process is found by its parent and read back from
``/proc/<pid>/status`` (uid, groups, capabilities), a signal to the root process stops it, and so
does the root process's death. A ticket it starts runs as the sandbox uid, never as its own."""

from __future__ import annotations

import grp
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli import _drop
from gate import users
from sandbox import load_policy
from segfactory import handover
from tests.conftest import REPO

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as segfactory needs root")
SETUP_S = 600.0  # root's set-up before the drop: sandbox verify, the served gate (a loaded machine)
STOP_S = 60.0  # for the restarted command to end after its parent was signalled or killed
CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def _status(pid: int) -> dict[str, list[str]]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {line.split(":")[0]: line.split(":", 1)[1].split() for line in text.splitlines()}


def _alive(pid: int) -> bool:
    try:
        return _status(pid)["State"][0] != "Z"
    except (OSError, KeyError):
        return False


def _restarted(parent: subprocess.Popen[str], uid: int, timeout: float = SETUP_S) -> int:
    """The pid of the process ``parent`` restarted as ``uid`` (once it runs Python as that user)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and parent.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                status = _status(int(pid))
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, KeyError):
                continue
            if status["PPid"] == [str(parent.pid)] and status["Uid"][0] == str(uid) and b"runpy" in cmdline:
                return int(pid)
        time.sleep(0.1)
    raise AssertionError(f"no process restarted as uid {uid}; the command said: {_said(parent)}")


def _said(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        return "(still running)"
    return (proc.stderr.read() if proc.stderr else "")[-2000:]


@pytest.fixture(scope="module")
def demo_home() -> Iterator[Path]:
    """``segfactory init --profile demo`` as root, under a directory others may enter."""
    base = Path(tempfile.mkdtemp(prefix="sf-drop-"))
    os.chmod(base, 0o755)
    home = base / "home"
    done = subprocess.run(
        [sys.executable, "-m", "segfactory", "init", "--profile", "demo", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert users.vault_is_separated(home / "vault")
    yield home
    subprocess.run(["rm", "-rf", str(base)], check=False)


def _default_signals() -> None:
    """As a terminal starts a command: SIGHUP and SIGINT at their defaults, even when these tests
    run under ``nohup`` (whose ignored SIGHUP the command would keep, and rightly)."""
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def _start(home: Path, *argv: str, stdout: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "segfactory", *argv, "--home", str(home)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        preexec_fn=_default_signals,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


COMMANDS = {
    "run": ("run", "--budget", "10m", "--backend", "bwrap"),
    "aa": ("aa", "--runs", "1", "--backend", "bwrap"),
    "compare": ("compare", "--arms", "sweep-random", "--seeds", "1", "--budget", "3m", "--backend", "bwrap"),
    "sweep": ("sweep", "--budget", "3m", "--backend", "bwrap"),
    "console": ("console", "--port", "0"),
}


@AS_ROOT
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_started_as_root_the_command_continues_as_segfactory_and_stops_with_sigterm(
    demo_home: Path, command: str
) -> None:
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    parent = _start(demo_home, *COMMANDS[command])
    try:
        child = _restarted(parent, me.pw_uid)
        gate = _restarted_gate(parent.pid, pwd.getpwnam(users.GATE_USER).pw_uid)
        status = _status(child)
        assert status["Uid"] == [str(me.pw_uid)] * 4 and status["Gid"] == [str(me.pw_gid)] * 4
        assert status["Groups"] == [str(me.pw_gid)]  # bwrap: no group but its own
        assert all(int(status[cap][0], 16) == 0 for cap in CAPS), {cap: status[cap] for cap in CAPS}
        parent.send_signal(signal.SIGTERM)  # a supervisor stopping what it started
        code = parent.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while (_alive(child) or _alive(gate)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), f"the restarted {command} outlived its root parent"
        # the root process passed the signal on and waited: it exits with the child's code, not
        # killed by the signal itself, and stopped the gate it served
        assert code in (0, 128 + signal.SIGTERM), (code, _said(parent))
        assert not _alive(gate), "the gate served for the command outlived it"
    finally:
        _stop(parent)


@AS_ROOT
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_an_interrupt_or_a_hangup_reaches_the_restarted_command_too(demo_home: Path, sig: int) -> None:
    """Ctrl-C, or the terminal going away, stops the whole command as SIGTERM does: the root
    process passes the signal on and waits, rather than dying of it and leaving the child."""
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    parent = _start(demo_home, "console", "--port", "0", stdout=subprocess.PIPE)
    try:
        child = _restarted(parent, me.pw_uid)
        gate = _restarted_gate(parent.pid, pwd.getpwnam(users.GATE_USER).pw_uid)
        _serving(parent)
        parent.send_signal(sig)
        code = parent.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while (_alive(child) or _alive(gate)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child) and not _alive(gate), f"the restarted console outlived {sig!r}"
        assert code >= 0, f"the root process died of {sig!r} itself rather than passing it on"
    finally:
        _stop(parent)


@AS_ROOT
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.bwrap
def test_the_restarted_command_and_its_gate_die_with_a_killed_parent(demo_home: Path) -> None:
    """SIGKILL cannot be passed on: the restarted console and the gate served for it end anyway."""
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    gate_uid = pwd.getpwnam(users.GATE_USER).pw_uid
    parent = _start(demo_home, "console", "--port", "0", stdout=subprocess.PIPE)
    try:
        child = _restarted(parent, me.pw_uid)
        gate = _restarted_gate(parent.pid, gate_uid)
        _serving(parent)  # armed long since: a parent that dies before that is the re-check's case
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + STOP_S
        while (_alive(child) or _alive(gate)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the restarted console outlived its killed root parent"
        assert not _alive(gate), "the gate served for it outlived its killed root parent"
    finally:
        _stop(parent)


def _serving(console: subprocess.Popen[str]) -> None:
    """Wait until the restarted console prints its login link (it has started, and serves)."""
    assert console.stdout is not None
    for line in console.stdout:
        if line.startswith("open: http"):
            return
    raise AssertionError(f"the console never served: {_said(console)}")


def _restarted_gate(parent: int, uid: int) -> int:
    deadline = time.monotonic() + SETUP_S
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                status = _status(int(pid))
            except (OSError, KeyError):
                continue
            if status["PPid"] == [str(parent)] and status["Uid"][0] == str(uid):
                return int(pid)
        time.sleep(0.1)
    raise AssertionError("no gate served as segfactory-gate for the command")


def test_a_signal_the_command_ignores_is_not_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started under nohup, the root process ignores SIGHUP, and so does the child it starts:
    the hangup is not turned into a stop. SIGTERM is still passed on."""
    sent: list[int] = []

    class Child:
        def send_signal(self, sig: int) -> None:
            sent.append(sig)

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(signal, "signal", _recording := _SignalTable())
    monkeypatch.setattr(signal, "getsignal", _recording.get)
    _recording.table[signal.SIGHUP] = signal.SIG_IGN
    with _drop._forwarding_signals(Child()):  # type: ignore[arg-type]
        assert _recording.table[signal.SIGHUP] is signal.SIG_IGN
        handler = _recording.table[signal.SIGTERM]
        assert callable(handler)
        handler(signal.SIGTERM, None)
    assert sent == [signal.SIGTERM] and _recording.table[signal.SIGTERM] is signal.SIG_DFL


class _SignalTable:
    """``signal.signal`` and ``signal.getsignal`` over a table, so a test changes no real handler."""

    def __init__(self) -> None:
        self.table: dict[int, object] = {}

    def get(self, sig: int) -> object:
        return self.table.get(sig, signal.SIG_DFL)

    def __call__(self, sig: int, handler: object) -> object:
        previous = self.get(sig)
        self.table[sig] = handler
        return previous


def test_a_process_whose_parent_is_already_gone_stops_at_once() -> None:
    """The re-check after arming the death signal: a parent that died before it (here: a pid that
    is not the parent) ends the process at start, with SIGTERM's code."""
    code = "from segfactory.handover import die_with_parent; die_with_parent(); print('ran on')"
    env = {**os.environ, handover.PARENT_ENV: str(os.getpid() + 10**6), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM and "ran on" not in done.stdout, done.stderr
    env[handover.PARENT_ENV] = str(os.getpid())  # its real parent: it runs on
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ran on" in done.stdout, done.stderr


# long enough to be seen from the host; /work's filesystem is left for the test to read
TICKET = "stat -f -c %T /work > /work/fs-kind; touch /work/mine; sleep {pause}; cat /work/mine"


@contextmanager
def _as_segfactory_with_identity(
    backend: str, workspace: Path, scratch: Path, extra_groups: tuple[int, ...] = ()
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """What the restarted command does with a ticket: a real sandbox started by ``segfactory``
    holding the ticket identity root made for it (as the drop makes it)."""
    pause = f"{7 + time.monotonic() % 1:.3f}"  # a mark to find the ticket's processes by
    # while the ticket runs, the restarted command (not root) looks for its file where the host
    # reads a running ticket's /work, and says whether it saw it there
    script = (
        "import sys, threading, time; from pathlib import Path\n"
        "from segfactory.handover import adopt; adopt()\n"
        "from sandbox import SandboxSpec, get_backend, live_workspace\n"
        f"ws = Path({str(workspace)!r})\n"
        "def look():\n"
        "    while not (live_workspace(ws) / 'mine').exists(): time.sleep(0.05)\n"
        "    print('live', live_workspace(ws) != ws, flush=True)\n"
        "threading.Thread(target=look, daemon=True).start()\n"
        f"command = ['sh', '-c', {TICKET.format(pause=pause)!r}]\n"
        "spec = SandboxSpec(command=command, workspace=ws, timeout_s=120)\n"
        f"sys.exit(get_backend({backend!r}).run(spec).exit_code)"
    )
    with _drop.ticket_identity() as (fd, env), _drop._readable_source(REPO) as source:
        paths = [Path(sys.base_prefix), Path(sys.prefix), source, workspace.parent]
        launcher = users.user_launcher(paths, users.ORCHESTRATOR_USER, extra_groups)
        env = {**os.environ, **env, "HOME": str(scratch), "XDG_CACHE_HOME": str(scratch)}
        proc = subprocess.Popen(
            [*launcher, sys.executable, "-c", script],
            env={**env, "PYTHONPATH": str(source)},
            cwd="/",
            pass_fds=(fd,),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            yield proc, pause
        finally:
            _stop(proc)


def _ticket_uids(mark: str, proc: subprocess.Popen[str]) -> set[int]:
    """Host uids of the ticket's own ``sleep`` processes, while they run."""
    deadline = time.monotonic() + SETUP_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", mark.encode()]:
                    found.add(int(_status(int(pid))["Uid"][1]))
            except (OSError, KeyError):
                continue
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(
        f"the ticket never ran: {proc.stderr.read() if proc.stderr and proc.poll() is not None else ''}"
    )


def _ticket_workspace(tmp_path: Path) -> tuple[Path, Path]:
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    os.chmod(tmp_path, 0o755)  # pytest makes it 0700; its private parents are bridged by the launcher
    scratch, workspace = tmp_path / "home", tmp_path / "ws" / "work"
    for folder in (scratch, workspace.parent, workspace):
        folder.mkdir()
        os.chown(folder, me.pw_uid, me.pw_gid)
    return scratch, workspace


@AS_ROOT
@pytest.mark.root
@pytest.mark.bwrap
def test_after_the_drop_a_bwrap_ticket_runs_as_the_sandbox_uid_not_the_orchestrator_s(tmp_path: Path) -> None:
    users.ensure_users()
    me, sandbox_uid = pwd.getpwnam(users.ORCHESTRATOR_USER), load_policy().uid
    scratch, workspace = _ticket_workspace(tmp_path)
    with _as_segfactory_with_identity("bwrap", workspace, scratch) as (proc, mark):
        assert _ticket_uids(mark, proc) == {sandbox_uid} and sandbox_uid != me.pw_uid
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert {p.lstat().st_uid for p in [workspace, *workspace.rglob("*")]} == {me.pw_uid}  # taken back
    # /work was a kernel-capped tmpfs of the identity's staging namespace, read live by the
    # unprivileged host through the stager's /proc root, and copied back once the ticket ended
    assert (workspace / "fs-kind").read_text() == "tmpfs\n" and (workspace / "mine").is_file()
    assert out.splitlines() == ["live True"], out


@AS_ROOT
@pytest.mark.root
@pytest.mark.docker
def test_after_the_drop_a_docker_ticket_runs_as_the_sandbox_uid_with_the_socket_group_for_that_tree_only(
    tmp_path: Path,
) -> None:
    """The dropped command holds the docker socket's group for its own process tree (``/etc/group``
    unchanged); without it the engine refuses; its container runs as the sandbox uid, not its own."""
    from tests.sandbox.conftest import docker_problem

    users.ensure_users()
    if problem := docker_problem():
        pytest.skip(f"no Docker engine could be started: {problem}")
    socket, groups = _drop.docker_socket_groups()
    if not groups:
        pytest.skip(f"the engine's socket {socket} is not shared through a group")
    me, sandbox_uid = pwd.getpwnam(users.ORCHESTRATOR_USER), load_policy().uid
    scratch, workspace = _ticket_workspace(tmp_path)
    with _as_segfactory_with_identity("docker", workspace, scratch) as (refused, _):
        _, err = refused.communicate(timeout=300)
    assert refused.returncode != 0 and "the Docker engine does not answer" in err, err[-2000:]
    with _as_segfactory_with_identity("docker", workspace, scratch, groups) as (proc, mark):
        assert _ticket_uids(mark, proc) == {sandbox_uid} and sandbox_uid != me.pw_uid
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert {p.lstat().st_uid for p in [workspace, *workspace.rglob("*")]} == {me.pw_uid}  # taken back
    assert users.ORCHESTRATOR_USER not in grp.getgrgid(groups[0]).gr_mem


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


def test_only_a_dropped_process_skips_the_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    from gate import users

    monkeypatch.setenv(users.VERIFIED_ENV, "bwrap")
    monkeypatch.setattr(users.os, "geteuid", lambda: 0)
    assert not users.verified_before_drop("bwrap")  # root always verifies itself
    monkeypatch.setattr(users.os, "geteuid", lambda: 999)
    assert users.verified_before_drop("bwrap") and not users.verified_before_drop("docker")


def test_a_private_checkout_is_staged_readable_for_the_restarted_command(tmp_path: Path) -> None:
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
