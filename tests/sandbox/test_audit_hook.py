"""The in-sandbox audit hook on every backend: each attempt is one record, whether it fails.

The attempts are the ones an LLM-written ticket made in a review: the vault by the home's
absolute path (nothing is mounted there: ENOENT), the environment through /proc, a write outside
/work (EROFS), TCP and UDP to the host (no network), ctypes, a process that would run without
the hook. What ordinary code does (imports, /work, /tmp, its own /proc files) is not recorded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from sandbox import SandboxResult

Run = Callable[..., SandboxResult]
HOOK_KINDS = {"file_open", "file_write", "socket_call", "ctypes_call", "process_spawn"}
ATTEMPTS = """
import ctypes, json, os, socket, subprocess, sys
home = sys.argv[1]

def attempt(label, action):
    try:
        action()
        print(label, "ok")
    except Exception as exc:
        print(label, type(exc).__name__)

# ordinary: none of these is recorded
import numpy
open("/work/ok.txt", "w").write("fine")
open("/tmp/scratch", "w").write("fine")
open("/proc/self/stat").read()
os.listdir("/work")
os.mkdir("/tmp/d")
# attempts: one record each
attempt("vault-by-home", lambda: open(home + "/vault/seeds.json").read())
attempt("own-environ", lambda: open("/proc/self/environ", "rb").read())
attempt("init-environ", lambda: open("/proc/1/environ", "rb").read())
attempt("write-opt", lambda: open("/opt/pwned", "w"))
attempt("mkdir-etc", lambda: os.mkdir("/etc/pwned"))
attempt("link-to-vault", lambda: os.symlink("/vault/seeds.json", "/work/seeds"))
attempt("read-the-link", lambda: open("/work/seeds").read())
attempt("list-vault", lambda: os.listdir("/vault"))
attempt("tcp", lambda: socket.create_connection(("10.0.2.2", 80), timeout=2))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.0.2.2", 53)))
attempt("ctypes-symbol", lambda: ctypes.CDLL(None).getpid())
attempt("ctypes-load", lambda: ctypes.CDLL("/work/evil.so"))
attempt("unhooked-python", lambda: subprocess.run([sys.executable, "-I", "-c", "pass"], check=True))
"""


def _hooked(result: SandboxResult) -> list[tuple[str, str, str]]:
    out = []
    for e in result.events:
        if e.kind in HOOK_KINDS:
            assert e.sandbox_reported
            detail = e.detail
            subject = e.path or next(
                (detail[k] for k in ("address", "symbol", "library", "argv") if k in detail), ""
            )
            out.append((e.kind, str(e.detail.get("op")), str(subject)))
    return out


def test_each_attempt_is_one_record_whether_it_fails(run_in: Run, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "vault").mkdir(parents=True)
    (home / "vault" / "seeds.json").write_text("{}")  # on the host; nothing of the home is mounted
    result = run_in(["python", "-c", ATTEMPTS, str(home)])
    out = result.stdout.data.decode()
    assert result.exit_code == 0, result.stderr.data[-2000:]
    assert "vault-by-home FileNotFoundError" in out and "write-opt OSError" in out, out
    assert "tcp OSError" in out and "udp OSError" in out, out
    assert _hooked(result) == [
        ("file_open", "open", f"{home}/vault/seeds.json"),
        ("file_open", "open", "/proc/self/environ"),
        ("file_open", "open", "/proc/1/environ"),
        ("file_write", "open", "/opt/pwned"),
        ("file_write", "mkdir", "/etc/pwned"),
        ("file_open", "symlink", "/vault/seeds.json"),
        ("file_open", "open", "/work/seeds"),
        ("file_open", "listdir", "/vault"),
        ("socket_call", "connect", "('10.0.2.2', 80)"),
        ("socket_call", "sendto", "('10.0.2.2', 53)"),
        ("ctypes_call", "dlsym", "getpid"),
        ("ctypes_call", "dlopen", "/work/evil.so"),
        ("process_spawn", "popen", '["/opt/python/bin/python", "-I", "-c", "pass"]'),
    ], out


def test_a_link_planted_in_work_is_followed(run_in: Run) -> None:
    result = run_in(
        ["python", "-c", "import os; os.symlink('/etc/../vault', '/work/v'); open('/work/v/seeds.json')"]
    )
    [opened] = [e for e in result.events if e.kind == "file_open" and e.detail.get("op") == "open"]
    assert opened.path == "/work/v/seeds.json" and opened.detail["resolved"] == "/vault/seeds.json"


def test_the_mountinfo_names_no_scratch_or_decoy_folder(run_in: Run) -> None:
    """The per-run scratch (the decoys, /etc, the hook's socket) is mounted from neutral names: a
    sandbox reading its mount table learns neither that /vault is a decoy nor whose run it is."""
    result = run_in(["cat", "/proc/self/mountinfo"])
    table = result.stdout.data.decode()
    assert "/vault" in table and "decoy" not in table and "segfactory-sbx" not in table, table
    # /work is a tmpfs of its own (as root, as these tests run): its line names no host path, so
    # neither the home nor the run and ticket ids
    if os.geteuid() == 0:
        [work] = [line.split() for line in table.splitlines() if line.split()[4] == "/work"]
        assert work[3] == "/" and work[work.index("-") + 1] == "tmpfs", work
