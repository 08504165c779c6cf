"""Trust rule 1 as root: the vault belongs to segfactory-gate, and the orchestrator, as the CLI
really starts it, runs as an unprivileged user that gets EACCES on every vault file, and can
neither move nor replace the vault, the gate's socket directory or the home marker; the home
root stays root's; the gate serves no vault it does not own, reached through a path it does not
control; root follows no link in its chown walk and imports nothing from its directory."""

from __future__ import annotations

import grp
import os
import pwd
import queue
import re
import shutil
import signal
import socket
import stat
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
from gate.client import GateClient, running_gate
from gate.pinned import current_pinned
from segfactory.errors import HomeError
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


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_after_the_drop_the_home_root_is_root_s_and_only_the_orchestrator_s_parts_are_its_own(
    separated_home: Path, orchestrator: Orchestrator
) -> None:
    """The table of docs/trust.md, read back from a home that a real drop prepared."""
    gate = pwd.getpwnam(users.GATE_USER)
    group = grp.getgrnam(users.GROUP).gr_gid
    home = separated_home
    assert (home.stat().st_uid, home.stat().st_gid, _mode(home)) == (0, group, 0o1775)
    assert (home / "home.json").stat().st_uid == 0
    assert ((home / "vault").stat().st_uid, _mode(home / "vault")) == (gate.pw_uid, 0o700)
    run_dir = home / "gate-run"
    assert (run_dir.stat().st_uid, run_dir.stat().st_gid, _mode(run_dir)) == (gate.pw_uid, group, 0o750)
    host, agent = run_dir / "host.token", run_dir / "agent.token"
    assert (host.stat().st_uid, _mode(host)) == (gate.pw_uid, 0o600)  # the gate user's alone
    assert (agent.stat().st_uid, agent.stat().st_gid, _mode(agent)) == (gate.pw_uid, group, 0o640)
    for name in users.ORCHESTRATOR_DIRS:
        assert {p.lstat().st_uid for p in [home / name, *(home / name).rglob("*")]} == {orchestrator.uid}, (
            name
        )


# what the orchestrator tries against the entries of the home root that are not its own: move each
# away, remove it, put one of its own (a directory, a file, a link) in its place; read the host token
REARRANGE = """
cd "$1" || exit 9
err=$(mktemp)
attempt() { if "$@" 2>"$err"; then echo "DONE: $*"; else echo "REFUSED: $*: $(cat "$err")"; fi; }
for entry in vault gate-run home.json; do attempt mv -T "$entry" "$entry.moved"; done
attempt rmdir vault; attempt rmdir gate-run; attempt rm -f home.json
mkdir own-vault own-run; echo '{}' > own.json; ln -s /tmp own-link
attempt mv -T own-vault vault; attempt mv -T own-run gate-run
attempt mv -T own.json home.json; attempt mv -T own-link home.json
attempt cat gate-run/host.token
attempt touch state.sqlite-probe; attempt rm state.sqlite-probe
rm -rf own-vault own-run own.json own-link "$err"
"""
DENIED = ("Operation not permitted", "Permission denied")


def test_as_segfactory_the_vault_gate_run_and_marker_can_be_neither_moved_nor_replaced(
    separated_home: Path, orchestrator: Orchestrator
) -> None:
    before = {name: (separated_home / name).lstat().st_ino for name in ("vault", "gate-run", "home.json")}
    out = _as(orchestrator, REARRANGE, str(separated_home))
    lines = out.stdout.strip().splitlines()
    refused = [line for line in lines if line.startswith("REFUSED")]
    assert len(refused) == 11 and all(any(d in line for d in DENIED) for line in refused), out.stdout
    assert [line for line in lines if line.startswith("DONE")] == [
        "DONE: touch state.sqlite-probe",  # its own files at the home root it still makes and removes
        "DONE: rm state.sqlite-probe",
    ], out.stdout + out.stderr
    assert {n: (separated_home / n).lstat().st_ino for n in before} == before


def test_as_segfactory_python_gets_eperm_renaming_the_vault(
    separated_home: Path, orchestrator: Orchestrator
) -> None:
    """``os.rename(home / 'vault', ...)`` by the orchestrator's uid, the call the review made."""
    script = (
        "import errno, os, sys\n"
        "try:\n"
        "    os.rename(sys.argv[1] + '/vault', sys.argv[1] + '/vault.old')\n"
        "except OSError as exc:\n"
        "    print(errno.errorcode[exc.errno])\n"
        "else:\n"
        "    print('RENAMED')\n"
    )
    out = _as(orchestrator, 'exec /usr/bin/python3 -I -c "$1" "$2"', script, str(separated_home))
    assert out.stdout.strip() in ("EPERM", "EACCES"), out.stdout + out.stderr
    assert (separated_home / "vault").is_dir()


def _serve(home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``gate serve`` as root on ``home``; stopped by its own refusal, else by the timeout."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "segfactory",
            "gate",
            "serve",
            "--home",
            str(home),
            "--socket",
            str(home / "s"),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )


def _planted_copy(where: Path, marker: Path) -> Path:
    """A "pinned copy" whose boot module writes ``marker``: what a swapped vault would run."""
    boot = where / "gate" / "_serve_pinned.py"
    boot.parent.mkdir(parents=True)
    (boot.parent / "__init__.py").write_text("")
    boot.write_text(f"def main(argv):\n    open({str(marker)!r}, 'w').write('ran')\n    return 0\n")
    return where


def test_the_gate_refuses_a_vault_the_orchestrator_swapped_in(separated_home: Path, tmp_path: Path) -> None:
    """A vault that ``segfactory`` owns (what a rename would have let it put in place), whose
    ``CURRENT`` names a copy it wrote: root's ``gate serve`` runs none of it."""
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    os.chmod(tmp_path, 0o755)
    home, marker = tmp_path / "home", tmp_path / "ran-as-root"
    (home / "vault" / "gate-pinned").mkdir(parents=True)
    (home / "home.json").write_text('{"profile": "test"}')
    copy = _planted_copy(tmp_path / "evil", marker)
    (home / "vault" / "gate-pinned" / "CURRENT").write_text(f"{copy}\n")
    for path in [home / "vault", *(home / "vault").rglob("*")]:
        os.chown(path, me.pw_uid, me.pw_gid)
    os.chmod(home / "vault", 0o700)
    out = _serve(home)
    assert out.returncode != 0 and "refuses to serve" in out.stderr, out.stderr[-500:]
    assert f"belongs to uid {me.pw_uid}" in out.stderr and not marker.exists()


def test_current_may_name_a_digest_only(tmp_path: Path) -> None:
    """A root-owned vault whose ``CURRENT`` holds an absolute path: refused, nothing run."""
    os.chmod(tmp_path, 0o755)
    home, marker = tmp_path / "home", tmp_path / "ran-as-root"
    (home / "vault" / "gate-pinned").mkdir(parents=True)
    os.chmod(home / "vault", 0o700)
    (home / "home.json").write_text('{"profile": "test"}')
    for named in (str(_planted_copy(tmp_path / "evil", marker)), "../../evil"):
        (home / "vault" / "gate-pinned" / "CURRENT").write_text(named + "\n")
        out = _serve(home)
        assert out.returncode != 0 and "must hold the sha256 digest" in out.stderr, out.stderr[-500:]
        assert not marker.exists()


def test_the_gate_refuses_a_vault_under_a_directory_the_orchestrator_controls(tmp_path: Path) -> None:
    me = pwd.getpwnam(users.ORCHESTRATOR_USER)
    os.chmod(tmp_path, 0o755)
    theirs = tmp_path / "theirs"
    home, _ = build_home(theirs / "home")
    os.chown(theirs, me.pw_uid, me.pw_gid)  # it could rename ``home`` and put another in its place
    out = _serve(home)
    assert out.returncode != 0 and "refuses to serve" in out.stderr, out.stderr[-500:]
    assert f"{theirs} belongs to uid {me.pw_uid}" in out.stderr


def test_the_drop_chowns_nothing_through_a_link(tmp_path: Path) -> None:
    """``runs -> <a root directory>`` in the home: the drop refuses it and the target stays root's;
    a link inside ``audit/`` is left alone while the rest is given."""
    users.ensure_users()
    os.chmod(tmp_path, 0o755)
    home, outside = tmp_path / "home", tmp_path / "etc-like"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    (home / "audit").mkdir(parents=True)
    (home / "audit" / "log.jsonl").write_text("")
    (home / "audit" / "shadow").symlink_to(outside / "passwd")
    (home / "runs").symlink_to(outside)
    with pytest.raises(HomeError, match="runs is a link or not a directory"):
        users.give_home_to_orchestrator(home)
    assert {p.lstat().st_uid for p in [outside, *outside.iterdir()]} == {0}
    (home / "runs").unlink()
    users.give_home_to_orchestrator(home)
    uid = pwd.getpwnam(users.ORCHESTRATOR_USER).pw_uid
    assert (home / "audit" / "log.jsonl").stat().st_uid == uid and (home / "runs").stat().st_uid == uid
    assert {p.lstat().st_uid for p in [outside, *outside.iterdir()]} == {0}
    assert home.stat().st_uid == 0


def test_a_module_planted_in_root_s_directory_is_not_imported_by_the_gate_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root's current directory holds ``segfactory/``, ``cli/`` and ``gate/`` packages (a home the
    orchestrator writes, say): neither the served gate of the drop nor ``running_gate`` imports
    them."""
    from cli import _drop
    from segfactory.home import Home

    users.ensure_users()
    os.chmod(tmp_path, 0o755)
    home, _ = build_home(tmp_path / "home", separate_users=True)
    planted, marker = tmp_path / "planted", tmp_path / "imported-as-root"
    for package in ("segfactory", "cli", "gate"):
        (planted / package).mkdir(parents=True)
        (planted / package / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write({package!r})\n")
    (planted / "segfactory" / "__main__.py").write_text("")
    monkeypatch.chdir(planted)
    with _drop._served_gate(Home(home)):
        assert GateClient(socket_path=home / "gate-run" / "gate.sock").status().pinned_code_ok is True
    with running_gate(home) as client:
        assert client.status().pinned_code_ok is True
    assert not marker.exists(), marker.read_text()


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
