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
EVENTS_TARGET = "/run/segfactory"  # rw, per run: where the in-sandbox audit hook writes
HOOK_FILE = f"{EVENTS_TARGET}/hook.jsonl"
WORKER_PACKAGES = ("segfactory", "synthetic", "vision")  # the minimum the worker imports
HOOK_PREFIXES = (
    "/data/holdout",
    "/vault",
    "/proc/1/",
    "/root",
    "/home",
    "/etc/shadow",
    "/var/run",
    "/run/docker",
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
    "SEGFACTORY_HOOK_FILE": HOOK_FILE,
    "SEGFACTORY_HOOK_PREFIXES": ":".join(HOOK_PREFIXES),
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


def sandbox_env(extra: dict[str, str]) -> dict[str, str]:
    """The complete environment inside: the base plus the caller's; nothing from the host."""
    return {**BASE_ENV, **extra}


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
