"""Trust rule 1 as root: the vault belongs to segfactory-gate, and the orchestrator, as the CLI
really starts it, runs as an unprivileged user that gets EACCES on every vault file."""

from __future__ import annotations

import os
import pwd
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gate import users
from gate.client import running_gate
from gate.pinned import current_pinned
from tests.gate import models
from tests.gate.conftest import build_home

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="user separation needs root (root bypasses modes)"),
]
START_S = 120.0  # the console's set-up: the gate served as its own user, then the drop


@pytest.fixture(scope="module")
def separated_home() -> Iterator[Path]:
    users.ensure_users()
    base = Path(tempfile.mkdtemp(prefix="sf-users-"))
    os.chmod(base, 0o755)  # a home others may traverse, like /var/lib/segfactory
    home, _ = build_home(base / "home", separate_users=True)
    yield home
    shutil.rmtree(base, ignore_errors=True)


@dataclass(frozen=True)
class Orchestrator:
    pid: int
    uid: int
    gid: int
    groups: list[int]
    url: str


def _ids(pid: int) -> tuple[int, int, list[int], int]:
    status = Path(f"/proc/{pid}/status").read_text()
    field = {line.split(":")[0]: line.split(":", 1)[1].split() for line in status.splitlines()}
    return (
        int(field["Uid"][1]),
        int(field["Gid"][1]),
        [int(g) for g in field["Groups"]],
        int(field["CapEff"][0], 16),
    )


def _listener(port: int, timeout: float = 60.0) -> int:
    """The pid of the process that holds the TCP listener on ``port`` (the link is printed before it
    binds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = _holder(port)
        if pid is not None:
            return pid
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port}")


def _holder(port: int) -> int | None:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":
                inodes.add(cols[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if any(link == f"socket:[{inode}]" for link in links for inode in inodes):
            return int(pid)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def orchestrator(separated_home: Path) -> Iterator[Orchestrator]:
    """``segfactory console`` started as root, the way a person starts it; the process that serves."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "segfactory", "console", "--home", str(separated_home), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    deadline, url = time.monotonic() + START_S, ""
    while not url and time.monotonic() < deadline and proc.poll() is None:
        try:
            found = re.search(r"open: (http://\S+)", lines.get(timeout=1.0))
        except queue.Empty:
            continue
        url = found.group(1) if found else ""
    assert url, (
        f"the console did not start: {proc.stderr.read() if proc.poll() is not None and proc.stderr else ''}"
    )
    try:
        pid = _listener(port)
        uid, gid, groups, _ = _ids(pid)
        yield Orchestrator(pid, uid, gid, groups, url)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _as(
    who: Orchestrator | tuple[int, int, list[int]], script: str, *args: str
) -> subprocess.CompletedProcess[str]:
    uid, gid, groups = (who.uid, who.gid, who.groups) if isinstance(who, Orchestrator) else who
    ids = [
        f"--reuid={uid}",
        f"--regid={gid}",
        f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
    ]
    return subprocess.run(
        ["setpriv", *ids, "sh", "-c", script, "sh", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def test_vault_belongs_to_the_gate_user(separated_home: Path) -> None:
    vault = separated_home / "vault"
    gate_uid = pwd.getpwnam(users.GATE_USER).pw_uid
    pinned = current_pinned(vault)
    assert pinned is not None
    assert vault.stat().st_uid == gate_uid and (vault.stat().st_mode & 0o777) == 0o700
    assert all(p.lstat().st_uid == gate_uid for p in vault.rglob("*") if not p.is_relative_to(pinned))
    assert all(p.lstat().st_uid == 0 for p in [pinned, *pinned.rglob("*")])  # the code it runs is root's


def test_the_orchestrator_runs_as_the_unprivileged_user(orchestrator: Orchestrator) -> None:
    uid, _, _, caps = _ids(orchestrator.pid)
    assert uid == pwd.getpwnam(users.ORCHESTRATOR_USER).pw_uid and uid != 0
    assert caps == 0, f"the orchestrator kept capabilities {caps:#x}"


def test_the_orchestrator_user_gets_eacces_on_every_vault_file(
    separated_home: Path, orchestrator: Orchestrator
) -> None:
    files = [str(p) for p in (separated_home / "vault").rglob("*") if p.is_file()]
    assert len(files) > 10
    script = (
        'for f; do if cat "$f" >/dev/null 2>/tmp/sf-err-$$; then echo READ; else cat /tmp/sf-err-$$; fi; done'
    )
    out = _as(orchestrator, script, *files)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(files) and all("Permission denied" in line for line in lines), out.stdout[:500]


def test_the_console_works_after_the_drop(separated_home: Path, orchestrator: Orchestrator) -> None:
    with httpx.Client(follow_redirects=True, timeout=30) as http:
        page = http.get(orchestrator.url)  # /login?token=…, then the runs page
    assert page.status_code == 200, page.text[:300]
    owned = {p.stat().st_uid for p in [separated_home, separated_home / "runs", separated_home / "audit"]}
    assert owned == {orchestrator.uid}  # the home's writable parts are the orchestrator's


def test_the_gate_user_cannot_write_its_pinned_copy(separated_home: Path) -> None:
    pinned = current_pinned(separated_home / "vault")
    assert pinned is not None
    entry = pwd.getpwnam(users.GATE_USER)
    gate_ids = (entry.pw_uid, entry.pw_gid, [entry.pw_gid, *os.getgrouplist(users.GATE_USER, entry.pw_gid)])
    out = _as(
        gate_ids,
        (
            'mkdir "$1/gate/__pycache__" 2>&1; echo x >> "$1/gate/core.py" 2>&1; '
            'chmod u+w "$1/gate/core.py" 2>&1'
        ),
        str(pinned),
    )
    said = out.stdout + out.stderr  # the shell reports a refused redirection on its own stderr
    assert said.count("Permission denied") + said.count("Operation not permitted") == 3, said


def test_gate_serves_as_its_own_user_without_opening_root(separated_home: Path, tmp_path: Path) -> None:
    root_mode = os.stat("/root").st_mode
    model = models.save(models.threshold_model(bias=-0.45), tmp_path / "m.onnx")
    with running_gate(separated_home) as client:
        uid, _, _, _ = _ids(int(client.server_pid or 0))
        assert uid == pwd.getpwnam(users.GATE_USER).pw_uid
        assert client.status().pinned_code_ok is True
        assert client.submit(model, None, "as-gate-user").verdict.value == "WIN"
    assert os.stat("/root").st_mode == root_mode


def test_two_inits_at_once_may_both_try_to_create_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loser of a creation race sees useradd fail on a user that now exists: not an error.
    A failure while the user is still missing is one, with useradd's own message."""
    from segfactory.errors import HomeError

    made: list[str] = []

    def lost_the_race(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        made.append(argv[-1])  # the other init created it a moment earlier
        return subprocess.CompletedProcess(argv, 9, "", f"useradd: user '{argv[-1]}' already exists")

    monkeypatch.setattr(users.subprocess, "run", lost_the_race)
    users._create(lambda: bool(made), ["useradd", "--system", "segfactory"])
    assert made == ["segfactory"]
    with pytest.raises(
        HomeError, match="useradd segfactory failed \\(9\\): useradd: user 'segfactory' already"
    ):
        users._create(lambda: False, ["useradd", "--system", "segfactory"])
