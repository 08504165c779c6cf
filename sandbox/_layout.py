"""What a sandbox sees: the mount plan and the environment, shared by every backend.

Inside paths are stable whatever the host: the Python runtime at ``/opt/python``, the venv's
site-packages at ``/opt/venv/site-packages``, the worker's package directories at
``/opt/segfactory/src/<pkg>``, the in-sandbox helpers at ``/opt/segfactory/inside``, all
read-only; ``/work`` read-write. The repo root is never mounted, only the named packages.
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from segfactory.home import SOURCE_ROOT

PYTHON_TARGET = "/opt/python"
SITE_TARGET = "/opt/venv/site-packages"
SRC_TARGET = "/opt/segfactory/src"
INSIDE_TARGET = "/opt/segfactory/inside"
EVENTS_TARGET = "/run/segfactory"  # ro, per run: holds the host's socket for the in-sandbox audit hook
HOOK_SOCKET_NAME = "hook.sock"  # a datagram socket the host binds in the per-run events dir
HOOK_SOCKET = f"{EVENTS_TARGET}/{HOOK_SOCKET_NAME}"
WORKER_PACKAGES = ("segfactory", "synthetic", "vision")  # the minimum the worker imports
RUNTIME_ROOTS = ("/opt/python", "/opt/venv", "/opt/segfactory")  # read-only code: the runtime, the helpers
WORKSPACE_TARGET = "/work"
WRITE_ROOTS = (WORKSPACE_TARGET, "/tmp")  # where sandbox code may write; a write elsewhere is recorded
# Read in every run by the interpreter, torch and numpy; an open anywhere else (beside the
# runtime, the data and the writable roots) is recorded by the audit hook, whether it succeeds.
SYSTEM_READ_ROOTS = (
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/fd",
    "/dev/shm",
    "/proc/self",
    "/proc/thread-self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/version",
    "/proc/sys/kernel/random",
    "/proc/sys/vm/overcommit_memory",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
)
# Recorded even under an ordinary root: the process's environment, memory and the host's root
# through /proc, and the names of held-back data (fnmatch, ``*`` matches ``/`` too).
HOOK_DENY = (
    "/proc/*/environ",
    "/proc/*/mem",
    "/proc/*/root",
    "/proc/*/root/*",
    "/proc/*/cwd",
    "/proc/*/cwd/*",
    "/proc/*/map_files/*",
    "/etc/shadow*",
    "/etc/gshadow*",
    "*/vault",
    "*/vault/*",
    "*/gate-run",
    "*/gate-run/*",
    "*/gate-pinned*",
)
INSIDE_DIR = Path(__file__).resolve().parent / "_inside"
BASE_ENV = {
    "PATH": f"{PYTHON_TARGET}/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH": f"{PYTHON_TARGET}/lib",  # the interpreter's RUNPATH names its host prefix
    "PYTHONPATH": f"{INSIDE_TARGET}:{SRC_TARGET}:{SITE_TARGET}",
    "PYTHONDONTWRITEBYTECODE": "1",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "SEGFACTORY_SANDBOX": "1",
}


@dataclass(frozen=True)
class Mount:
    """One bind mount: host ``source`` at ``target`` inside."""

    source: Path
    target: str
    read_only: bool = True


def runtime_mounts() -> list[Mount]:
    """The Python runtime, the venv's packages, the worker's package dirs and the helpers (ro)."""
    mounts = [
        Mount(Path(sys.base_prefix).resolve(), PYTHON_TARGET),
        Mount(Path(sysconfig.get_paths()["purelib"]).resolve(), SITE_TARGET),
        Mount(INSIDE_DIR, INSIDE_TARGET),
    ]
    for package in WORKER_PACKAGES:
        if (SOURCE_ROOT / package).is_dir():
            mounts.append(Mount(SOURCE_ROOT / package, f"{SRC_TARGET}/{package}"))
    return mounts


def sandbox_env(extra: dict[str, str], mounts: list[Mount]) -> dict[str, str]:
    """The complete environment inside: the base plus the caller's, then the audit hook's settings
    for this mount plan (which the caller cannot change); nothing from the host."""
    return {**BASE_ENV, **extra, **hook_env(mounts)}


def hook_env(mounts: list[Mount]) -> dict[str, str]:
    """What the in-sandbox audit hook needs: its socket, the roots it treats as ordinary and the
    patterns it always records. Read roots are the runtime, the mounted data and the system's;
    code roots (where a native library may come from) are the runtime's and the system's."""
    hidden = ("/opt/", "/data/holdout", "/vault", EVENTS_TARGET)  # the runtime is listed whole; decoys never
    data = [m.target for m in mounts if not m.target.startswith(hidden)]
    return {
        "SEGFACTORY_HOOK_SOCKET": HOOK_SOCKET,
        "SEGFACTORY_HOOK_READ": ":".join([*RUNTIME_ROOTS, *data, *WRITE_ROOTS, *SYSTEM_READ_ROOTS]),
        "SEGFACTORY_HOOK_WRITE": ":".join(
            [*WRITE_ROOTS, "/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd"]
        ),
        "SEGFACTORY_HOOK_CODE": ":".join([*RUNTIME_ROOTS, "/usr", "/lib", "/lib64"]),
        "SEGFACTORY_HOOK_DENY": ":".join(HOOK_DENY),
    }


ETC_FILES = {
    "passwd": "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/work:/bin/sh\n",
    "group": "root:x:0:\nsandbox:x:{gid}:\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    "hosts": "127.0.0.1 localhost sandbox\n",
}


def write_etc(directory: Path, uid: int, gid: int) -> None:
    """Write the minimal /etc (an unprivileged user, no secrets) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in ETC_FILES.items():
        (directory / name).write_text(text.format(uid=uid, gid=gid))
