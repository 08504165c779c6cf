"""cgroup v2 limits for the bwrap backend: one run's cgroup inside a writable, delegated subtree.

In cgroup v2 a process may create child cgroups only where the hierarchy was delegated to it
(systemd ``Delegate=yes``, a container's own cgroup namespace, or a directory chowned to it), and
a controller works in a child only when the parent lists it in ``cgroup.subtree_control``. The
parent is ``$SEGFACTORY_CGROUP_PARENT`` when set (an absolute path on a cgroup2 filesystem), else
this process's own cgroup when its ``cgroup.subtree_control`` already enables ``memory`` and
``pids`` and it is writable. Each run gets ``<parent>/sbx-<id>`` with ``memory.max`` (swap off, so
the limit counts everything), ``memory.oom.group`` (an OOM kills the whole sandbox), ``pids.max``
and ``cpu.max`` where the cpu controller is enabled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from sandbox._policy import Limits
from segfactory.errors import SandboxError

log = logging.getLogger(__name__)
PARENT_ENV = "SEGFACTORY_CGROUP_PARENT"  # a delegated cgroup2 directory to create run cgroups in
REQUIRED = ("memory", "pids")  # without these a run's limits would be per process: refused
CFS_PERIOD_US = 100_000  # cpu.max period: quota = cpus * period
RMDIR_TIMEOUT_S = 10.0  # keep killing and retrying rmdir this long while the last processes exit
RMDIR_RETRY_S = 0.02
CGROUP2_MAGIC = "cgroup2fs"  # what `stat -fc %T` says of a cgroup2 mount


def _mounts() -> list[Path]:
    """Mount points of cgroup2 filesystems, from this process's mountinfo."""
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                points.append(Path(left.split()[4]))
    return points


def _own_cgroup() -> Path | None:
    """This process's cgroup2 directory, or None (no cgroup2 mount, or not visible)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                rel = line[3:].strip().lstrip("/")
                for mount in _mounts():
                    if (mount / rel / "cgroup.procs").exists():
                        return mount / rel
    return None


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def configured_parent() -> Path | None:
    """``$SEGFACTORY_CGROUP_PARENT`` as a Path, or None when unset."""
    value = os.environ.get(PARENT_ENV, "").strip()
    return Path(value) if value else None


def find_parent() -> tuple[Path | None, str]:
    """(the delegated parent to use, or None; why not, when None)."""
    parent = configured_parent()
    if parent is None:
        own = _own_cgroup()
        if own is None:
            return None, "no cgroup2 hierarchy holds this process"
        if not set(REQUIRED) <= _words(own / "cgroup.subtree_control") or not os.access(own, os.W_OK):
            return None, (
                f"this process's cgroup {own} is not a delegated subtree with "
                f"{' and '.join(REQUIRED)} enabled for its children"
            )
        return own, ""
    if not parent.is_absolute() or not (parent / "cgroup.controllers").exists():
        return None, f"${PARENT_ENV}={parent} is not a cgroup2 directory (no cgroup.controllers)"
    missing = [c for c in REQUIRED if c not in _words(parent / "cgroup.controllers")]
    if missing:
        return None, (
            f"${PARENT_ENV}={parent} offers no {', '.join(missing)} controller "
            f"(cgroup.controllers: {' '.join(sorted(_words(parent / 'cgroup.controllers'))) or 'none'}); "
            "on a hybrid host the controller is bound to cgroup v1"
        )
    if not os.access(parent, os.W_OK):
        return (
            None,
            f"${PARENT_ENV}={parent} is not writable by uid {os.geteuid()}: delegate it (chown) first",
        )
    return parent, ""


class CgroupV2:
    """One run's cgroup v2 directory. ``procs_files`` is what the starting process joins."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path, limits: Limits) -> CgroupV2:
        """Make and limit ``<parent>/sbx-<id>``; SandboxError (nothing left behind) when it fails."""
        try:
            _enable(parent)
            path = parent / f"sbx-{uuid.uuid4().hex[:12]}"
            path.mkdir()
        except OSError as exc:
            raise SandboxError(
                f"cannot create a run cgroup under {parent}: {exc}; delegate the subtree "
                f"(see docs/sandbox.md) or set another ${PARENT_ENV}"
            ) from exc
        group = cls(path)
        try:
            group._apply(limits)
        except OSError as exc:
            group.remove()
            raise SandboxError(f"cannot limit the run cgroup {path}: {exc}") from exc
        return group

    def _write(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def _apply(self, limits: Limits) -> None:
        self._write("memory.max", str(limits.memory_bytes))
        if (self.path / "memory.swap.max").exists():  # swap counts against nothing else: keep it off
            self._write("memory.swap.max", "0")
        if (self.path / "memory.oom.group").exists():
            self._write("memory.oom.group", "1")
        self._write("pids.max", str(limits.pids))
        if (self.path / "cpu.max").exists():
            self._write("cpu.max", f"{int(limits.cpus * CFS_PERIOD_US)} {CFS_PERIOD_US}")
            self._write("cpu.weight", str(max(1, min(10_000, int(limits.cpus * 100)))))

    @property
    def procs_files(self) -> list[str]:
        return [str(self.path / "cgroup.procs")]

    def readback(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": "cgroup-v2", "path": str(self.path)}
        for key, name in (
            ("memory", "memory.max"),
            ("swap", "memory.swap.max"),
            ("pids", "pids.max"),
            ("cpu_max", "cpu.max"),
        ):
            with contextlib.suppress(OSError):
                out[key] = (self.path / name).read_text().strip()
        return out

    def oom_killed(self) -> bool:
        with contextlib.suppress(OSError):
            for line in (self.path / "memory.events").read_text().splitlines():
                key, _, count = line.partition(" ")
                if key in ("oom_kill", "oom_group_kill") and int(count) > 0:
                    return True
        return False

    def kill_all(self) -> None:
        """SIGKILL every process in the run's cgroup (``cgroup.kill`` where the kernel has it)."""
        if (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                self._write("cgroup.kill", "1")
                return
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        deadline = time.monotonic() + RMDIR_TIMEOUT_S
        while self.path.exists():
            try:
                self.path.rmdir()
            except OSError as exc:
                if time.monotonic() > deadline:
                    log.warning("sandbox cgroup %s not removed: %s", self.path, exc)
                    return
                self.kill_all()
                time.sleep(RMDIR_RETRY_S)


def _enable(parent: Path) -> None:
    """Enable the controllers for the parent's children (fails with EBUSY if it holds processes)."""
    enabled = _words(parent / "cgroup.subtree_control")
    wanted = [
        c for c in (*REQUIRED, "cpu") if c not in enabled and c in _words(parent / "cgroup.controllers")
    ]
    if wanted:
        (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
