"""Red-team attempts against every backend.

Each attempt must fail or be contained, be visible to host-side detection where the issue says
so (decoy reads), and leave the host healthy: no leftover process, no stray cgroup, no change to
protected files. Bombs and timeouts carry the ``slow`` mark.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runner._copyout import read_beneath
from sandbox import SandboxBackend, SandboxResult, live_workspace
from sandbox._cgroup import CGROUP_V1, PARENT
from segfactory.home import SOURCE_ROOT
from tests.sandbox.conftest import small_limits

# serial: the bombs load the whole host, and the leak checks count every run cgroup on it
pytestmark = pytest.mark.serial
Run = Callable[..., SandboxResult]
STATIC_READER = """
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) { char b[16]; int fd = open(argv[1], O_RDONLY); \
return fd < 0 ? 1 : read(fd, b, 16) < 0; }
"""


def _fake_home(tmp_path: Path) -> tuple[Path, str]:
    """A factory home with a secret in its vault and a pinned gate file."""
    home, token = tmp_path / "home", secrets.token_hex(16)
    (home / "vault" / "gate-pinned").mkdir(parents=True)
    (home / "home.json").write_text(json.dumps({"profile": "demo"}))
    (home / "vault" / "seeds.json").write_text(json.dumps({"confirm-a": token}))
    (home / "vault" / "gate-pinned" / "gate.py").write_text(f"TOKEN = {token!r}\n")
    return home, token


def _leftovers(token: str) -> list[str]:
    """Host processes whose command line holds ``token``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and token.encode() in (proc / "cmdline").read_bytes():
                found.append(proc.name)
        except OSError:
            continue
    return found


def _run_cgroups() -> set[Path]:
    parent = CGROUP_V1 / "pids" / PARENT
    return {p for p in parent.iterdir() if p.is_dir()} if parent.is_dir() else set()


def _assert_host_healthy(token: str, cgroups_before: set[Path]) -> None:
    """No process of ours left, no cgroup of ours left (others' runs may come and go meanwhile)."""
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert _leftovers(token) == []
    leaked = [p for p in _run_cgroups() - cgroups_before if not (p / "cgroup.procs").read_text().strip()]
    assert leaked == []


def test_vault_home_proc_root_and_environ_are_unreachable(
    run_in: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, token = _fake_home(tmp_path)
    monkeypatch.setenv("SEGF_REDTEAM", token)
    seeds = home / "vault" / "seeds.json"
    script = f"""
cat {seeds}; cat /proc/1/root{seeds}; cat /proc/1/environ /proc/*/environ
python -c "print(open('{seeds}').read())"
python -S -c "print(open('/proc/1/root{seeds}').read())"
python -c "import ctypes; l=ctypes.CDLL(None); print(l.open(b'{seeds}', 0))"
ls /proc/1/root{SOURCE_ROOT} {home} /root /var/lib/segfactory
true"""
    result = run_in(script)
    out = result.stdout.data + result.stderr.data
    assert token.encode() not in out
    assert b"-1\n" in result.stdout.data  # the ctypes open failed
    assert out.count(b"No such file") >= 6


def test_docker_socket_and_network_are_unreachable(run_in: Run) -> None:
    probe = """
import socket
for family, addr in ((socket.AF_UNIX, '/var/run/docker.sock'), (socket.AF_UNIX, '/run/docker.sock'),
                     (socket.AF_INET, ('172.17.0.1', 2375)), (socket.AF_INET, ('1.1.1.1', 443)),
                     (socket.AF_INET, ('127.0.0.1', 2375))):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(addr); print('CONNECTED', addr)
    except OSError as exc:
        print('refused', addr, type(exc).__name__)
"""
    result = run_in(["python", "-c", probe])
    assert result.exit_code == 0 and b"CONNECTED" not in result.stdout.data
    assert result.stdout.data.count(b"refused") == 5


def test_escape_from_work_through_symlinks_and_dotdot(run_in: Run, tmp_path: Path) -> None:
    token = secrets.token_hex(16)
    (tmp_path / "beside-workspace.txt").write_text(token)
    host = tmp_path / "beside-workspace.txt"
    script = f"""
cat /work/../beside-workspace.txt; cd /work/../../..; cat ./beside-workspace.txt {host}
ln -s {host} /work/link-abs; ln -s ../beside-workspace.txt /work/link-rel; cat /work/link-abs /work/link-rel
python -c "import os; print(os.listdir('/work/..'))"
true"""
    result = run_in(script)
    assert token.encode() not in result.stdout.data + result.stderr.data
    assert b"beside-workspace" not in result.stdout.data


def test_writes_outside_work_fail(run_in: Run, tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.mkdir()
    targets = [
        "/",
        "/usr",
        "/etc",
        "/opt/python",
        "/opt/segfactory/src/vision",
        "/opt/venv/site-packages",
        "/data/train",
        "/data/holdout",
        "/vault",
        "/bin",
        "/sbin",
    ]
    script = "; ".join(f"touch {t}/pwned 2>/dev/null && echo WROTE {t}" for t in targets)
    result = run_in(script + "; touch /tmp/ok /work/ok && echo fine", data={"train": train})
    assert b"WROTE" not in result.stdout.data and b"fine" in result.stdout.data
    assert not (SOURCE_ROOT / "vision" / "pwned").exists() and list(train.iterdir()) == []


def test_pinned_gate_cannot_be_modified(run_in: Run, tmp_path: Path) -> None:
    home, _token = _fake_home(tmp_path)
    gate = home / "vault" / "gate-pinned" / "gate.py"
    before = hashlib.sha256(gate.read_bytes()).hexdigest()
    result = run_in(
        f"echo 'WIN=1' >> {gate}; echo 'WIN=1' >> /proc/1/root{gate}; "
        f"python -c \"open('{gate}', 'a').write('x')\"; true"
    )
    assert hashlib.sha256(gate.read_bytes()).hexdigest() == before
    assert result.stderr.data.count(b"cannot create") == 2 and b"FileNotFoundError" in result.stderr.data


@pytest.fixture(scope="module")
def static_reader(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A statically linked reader (no libc from the sandbox), or None where gcc -static fails."""
    out = tmp_path_factory.mktemp("static") / "reader"
    return out if shutil.which("gcc") and _compile_static(out) else None


def test_decoy_reads_are_detected_whatever_the_reader(
    run_in: Run, tmp_path: Path, static_reader: Path | None
) -> None:
    readers = {
        "/data/holdout/images.npy": "cat /data/holdout/images.npy | head -c 16 >/dev/null",
        "/data/holdout/labels.npy": "python -S -c \"open('/data/holdout/labels.npy','rb').read(16)\"",
        "/vault/confirm-a/v1/masks.npy": (
            "python -I -c \"import ctypes; ctypes.CDLL(None).open(b'/vault/confirm-a/v1/masks.npy', 0)\""
        ),
    }
    if static_reader is not None:
        shutil.copy(static_reader, tmp_path / "ws" / "reader")
        readers["/vault/sealed/v1/masks.npy"] = "/work/reader /vault/sealed/v1/masks.npy"
    result = run_in("; ".join(readers.values()))
    seen = {e.path for e in result.events if e.kind == "protected_read_attempt" and not e.sandbox_reported}
    assert seen == set(readers)
    assert not any(e.kind == "monitoring_gap" for e in result.events)


def _compile_static(out: Path) -> bool:
    source = out.with_suffix(".c")
    source.write_text(STATIC_READER)
    proc = subprocess.run(
        ["gcc", "-static", "-O1", "-o", str(out), str(source)], capture_output=True, timeout=60
    )
    return proc.returncode == 0


def test_no_user_namespace_can_be_made_inside(run_in: Run) -> None:
    """A user namespace of its own would give sandboxed code capabilities over fresh namespaces,
    and with them kernel interfaces closed to an unprivileged user."""
    script = (
        "unshare -r true && echo MADE-BY-UNSHARE; "
        "python -c \"import ctypes; print('syscall', ctypes.CDLL(None).unshare(0x10000000))\"; true"
    )
    result = run_in(script)
    assert b"MADE-BY-UNSHARE" not in result.stdout.data, result.stderr.data
    assert b"syscall -1" in result.stdout.data, (result.stdout.data, result.stderr.data)


def test_giant_stdout_is_capped(run_in: Run) -> None:
    result = run_in("head -c 50000000 /dev/zero; echo done >&2")
    assert result.stdout.truncated and result.stdout.size == 50_000_000
    assert len(result.stdout.data) < result.stdout.size and result.stderr.data == b"done\n"


@pytest.mark.slow
def test_fork_bomb_is_contained(run_in: Run, tmp_path: Path) -> None:
    token = secrets.token_hex(8)
    (tmp_path / "ws" / f"bomb-{token}.sh").write_text("b() { b | b & }; b; sleep 100\n")
    before = _run_cgroups()
    result = run_in(["sh", f"/work/bomb-{token}.sh"], timeout_s=4, limits=small_limits(pids=64))
    assert result.timed_out or result.exit_code != 0
    _assert_host_healthy(token, before)


FORK_BOMB_MEMORY = """
import os, sys, time
pids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (96 * 1024**2)  # touches every page
        print("allocated", i, flush=True)
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
print("statuses", [os.waitpid(p, 0)[1] for p in pids], flush=True)
"""


@pytest.mark.slow
def test_memory_bomb_of_forked_processes_is_oom_killed(run_in: Run) -> None:
    """Four processes of 96 MiB each fit a 256 MiB limit one by one (an rlimit is per process),
    not together: only a whole-sandbox limit stops them."""
    result = run_in(["python", "-c", FORK_BOMB_MEMORY], limits=small_limits(memory_bytes=256 * 1024**2))
    assert result.oom_killed, (result.exit_code, result.stdout.data, result.stderr.data)
    # all four may finish allocating before the kernel acts; what a per-process limit never does is
    # kill any of them, so at least one must have been killed (or the parent with them)
    statuses = result.stdout.data.split(b"statuses", 1)[1] if b"statuses" in result.stdout.data else b"killed"
    assert b"[0, 0, 0, 0]" not in statuses, result.stdout.data


def _kernel_capped(run_in: Run) -> bool:
    """Whether this backend gives /work a kernel-capped tmpfs here (bwrap as root or holding the
    ticket identity); elsewhere the cap is a walk of the workspace every poll."""
    result = run_in("stat -f -c %T /work")
    return result.stdout.data.strip() == b"tmpfs"


def test_work_is_a_tmpfs_of_the_workspace_s_size(backend: SandboxBackend, run_in: Run) -> None:
    """docker: a tmpfs volume; bwrap: a tmpfs of the stager's, as root or with the ticket identity
    (tests/test_drop.py); a developer's own bwrap has the walk."""
    if backend.name == "bwrap" and os.geteuid() != 0:
        pytest.skip("bwrap caps /work in the kernel as root or with the ticket identity only")
    limits = small_limits(workspace_bytes=8 * 1024**2, workspace_files=300)
    result = run_in("stat -f -c '%T %b %S %c' /work", limits=limits)
    kind, blocks, block_size, inodes = result.stdout.data.split()
    assert kind == b"tmpfs" and int(blocks) * int(block_size) == 8 * 1024**2 and int(inodes) == 300


@pytest.mark.slow
def test_full_disk_in_work_and_tmp_is_contained(run_in: Run, tmp_path: Path) -> None:
    """Many writers that keep going past a full /work: the sandbox is killed, and where the kernel
    caps /work nothing was ever written past the cap, and nothing of it is left behind."""
    limit = 64 * 1024**2
    writer = "i=0; while true; do head -c 8000000 /dev/zero > /work/$1/f$i; i=$((i+1)); done"
    script = (
        "dd if=/dev/zero of=/work/one bs=1M count=100 2>/dev/null; echo one=$?; "
        "head -c 32000000 /dev/zero > /tmp/t; echo tmp=$?; rm -f /work/one; "
        + " ".join(f"mkdir /work/w{n}; sh -c '{writer}' sh w{n} 2>/dev/null &" for n in range(4))
        + " wait"
    )
    limits = small_limits(workspace_bytes=limit, file_bytes=32 * 1024**2, tmp_bytes=16 * 1024**2)
    kernel = _kernel_capped(run_in)
    result = run_in(script, limits=limits, timeout_s=20)
    assert b"one=0" not in result.stdout.data and b"tmp=0" not in result.stdout.data
    [event] = [e for e in result.events if e.kind == "workspace_limit"]
    assert event.detail["enforced_by"] == ("kernel" if kernel else "walk") and not result.timed_out
    left = sum(p.lstat().st_blocks * 512 for p in (tmp_path / "ws").rglob("*"))
    if kernel:
        assert event.detail["used_bytes"] <= limit and left == 0  # killed: no copy-back, nothing left
    else:
        assert left < limit + 1024**3  # polled: what four writers manage between two walks


@pytest.mark.slow
def test_an_inode_bomb_in_work_is_killed(run_in: Run, tmp_path: Path) -> None:
    """Empty files take no blocks, so a byte cap alone never fires; each is an inode of the host's
    filesystem (the audit log's and the vault's). Several writers that go on past a refusal."""
    limit = 2_000
    writer = "i=0; while true; do touch /work/$1/f$i 2>/dev/null; i=$((i+1)); done"
    script = "\n".join([f"mkdir /work/w{n}; sh -c '{writer}' sh w{n} &" for n in range(4)] + ["wait"])
    kernel = _kernel_capped(run_in)
    result = run_in(script, limits=small_limits(workspace_files=limit), timeout_s=60)
    [event] = [e for e in result.events if e.kind == "workspace_limit"]
    assert event.detail["limit_files"] == limit
    assert not result.timed_out and result.duration_s < 10  # killed at the first poll that saw it full
    left = sum(1 for _ in (tmp_path / "ws").rglob("*"))
    if kernel:  # the kernel refused the 2,001st inode (the tmpfs root is one), and nothing is left
        assert event.detail["files"] == limit and left == 0, (event.detail, left)
    else:  # a walk every WORKSPACE_POLL_S: four writers make tens of thousands of files before it
        assert event.detail["files"] > limit and limit < left < 500_000, left


def test_what_a_ticket_leaves_in_work_comes_back_as_it_left_it(run_in: Run, tmp_path: Path) -> None:
    """Copied back from the tmpfs without following anything: a link stays a link (to a host file
    it must not reach), a FIFO stays a FIFO, and the inputs the ticket removed are gone."""
    workspace = tmp_path / "ws"
    (workspace / "config.yaml").write_text("epochs: 1\n")
    (workspace / "drop-me").write_text("x")
    script = (
        "cat config.yaml; mkdir -p out; echo model > out/model.onnx; ln -s /etc/shadow out/link; "
        "mkfifo out/fifo; ln out/model.onnx out/hard; rm drop-me; chmod 000 out/model.onnx; exit 7"
    )
    result = run_in(script)
    assert result.exit_code == 7 and result.stdout.data == b"epochs: 1\n"
    out = workspace / "out"
    assert os.readlink(out / "link") == "/etc/shadow" and stat.S_ISFIFO((out / "fifo").lstat().st_mode)
    assert (out / "hard").lstat().st_ino == (out / "model.onnx").lstat().st_ino
    assert (out / "hard").read_text() == "model\n" and not (workspace / "drop-me").exists()


def test_the_host_reads_a_running_ticket_s_work(run_in: Run, tmp_path: Path) -> None:
    """While the sandbox runs, ``live_workspace`` names where the host reads its /work (the tmpfs
    through the stager's /proc root, or the workspace itself); afterwards, the workspace."""
    workspace, seen, ended = (tmp_path / "ws").resolve(), [], threading.Event()

    def look() -> None:
        while not ended.is_set():
            try:
                data, _ = read_beneath(live_workspace(workspace), "out/curve.jsonl", cap=1024)
            except OSError:
                time.sleep(0.05)
                continue
            seen.append(data)
            return

    watcher = threading.Thread(target=look)
    watcher.start()
    # docker copies live files every LIVE_POLL_S (1 s): two polls fall inside the run
    result = run_in("mkdir out; echo epoch-1 > out/curve.jsonl; sleep 2", live=["out/curve.jsonl"])
    ended.set()
    watcher.join()
    assert result.exit_code == 0 and seen == [b"epoch-1\n"]  # read while the sandbox ran
    assert live_workspace(workspace) == workspace


@pytest.mark.slow
def test_outliving_the_timeout_is_killed(run_in: Run) -> None:
    token = secrets.token_hex(8)
    script = (
        f"trap '' TERM; setsid sh -c \"trap '' TERM; sleep 1000 # {token}\" & "
        f"nohup sleep 1001 & sh -c \"trap '' TERM; sleep 1002 # {token}\""
    )
    before = _run_cgroups()
    result = run_in(script, timeout_s=1)
    assert result.timed_out and result.duration_s < 15
    _assert_host_healthy(token, before)


def test_nothing_can_be_planted_or_removed_beside_the_hook_socket(run_in: Run) -> None:
    """The hook's directory is mounted read-only: no symlink to a host file, FIFO or forged log can
    be put there, and the host's socket cannot be removed (so no record is taken back)."""
    plants = [
        "ln -s /etc/passwd /run/segfactory/x",
        "mkfifo /run/segfactory/x",
        "echo forged > /run/segfactory/x",
        "rm -f /run/segfactory/hook.sock",
        "mv /run/segfactory/hook.sock /run/segfactory/y",
    ]
    result = run_in("; ".join(f"{p} 2>/dev/null && echo PLANTED" for p in plants) + "; ls /run/segfactory")
    assert b"PLANTED" not in result.stdout.data and result.stdout.data.split() == [b"hook.sock"]


HOOK_SENDER = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(int(sys.argv[1])):
    s.sendto(json.dumps({"k": "file_open", "op": "open", "path": f"/data/holdout/{i}"}).encode(),
             "/run/segfactory/hook.sock")
"""


def test_hook_events_past_the_cap_are_a_monitoring_gap(run_in: Run) -> None:
    from sandbox._hook import MAX_EVENTS

    sent = MAX_EVENTS + 500
    result = run_in(["python", "-I", "-c", HOOK_SENDER, str(sent)])
    assert result.exit_code == 0, result.stderr.data
    assert sum(e.kind == "file_open" for e in result.events) == MAX_EVENTS
    gaps = [e.detail for e in result.events if e.kind == "monitoring_gap"]
    assert gaps == [{"reason": "audit hook event cap", "kept": MAX_EVENTS, "seen": sent}]


def test_a_long_reported_path_is_cut_and_says_so(run_in: Run) -> None:
    from sandbox._hook import FIELD_MAX_CHARS

    path = "/vault/" + "x" * (FIELD_MAX_CHARS + 900)
    result = run_in(["python", "-c", f"open({path!r})"])  # the in-sandbox hook reports it, then it fails
    opens = [e for e in result.events if e.kind == "file_open"]
    assert len(opens) == 1 and opens[0].path == path[:FIELD_MAX_CHARS], result.stderr.data[-300:]
    assert opens[0].detail["truncated"] is True and opens[0].detail["path_chars"] == len(path)


FLOOD = """
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
n = 0
try:
    while True:
        s.sendto(b"x" * 100, "/run/segfactory/hook.sock")
        n += 1
except OSError as exc:
    print("stopped after", n, type(exc).__name__)
"""


def test_flooding_the_audit_hook_is_contained(run_in: Run) -> None:
    """A sandbox that sends without end is cut off (its sends then fail) and the flood is a gap."""
    from sandbox._hook import MAX_DATAGRAMS

    result = run_in(["python", "-I", "-c", FLOOD], timeout_s=60)
    assert b"stopped after" in result.stdout.data, (result.stdout.data, result.stderr.data[-500:])
    gaps = [e.detail for e in result.events if e.kind == "monitoring_gap"]
    assert [g["reason"] for g in gaps] == ["audit hook flood"] and gaps[0]["datagrams"] == MAX_DATAGRAMS + 1
    assert not result.timed_out
