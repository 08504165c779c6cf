"""Whole-sandbox limits for the bwrap backend: a cgroup per run, v1 or v2 (``sandbox._cgroup2``).

Without a cgroup, memory is limited per process (RLIMIT_DATA): eight forked processes of 3.5 GiB
each pass a 4 GiB limit and exhaust the host. So ``run_cgroup`` gives every run a cgroup, and
refuses to start a sandbox without one unless ``SEGFACTORY_SANDBOX_MEMORY=per-process`` says
explicitly that per-process limits are acceptable (``verify`` then fails its limits check).

cgroup v1 (as root, or with ``segfactory-sandbox/`` delegated by ``delegate_v1``): each run gets
``<controller>/segfactory-sandbox/<id>`` in the memory, pids and cpu hierarchies. cgroup v2: a
run cgroup in a writable delegated subtree (``$SEGFACTORY_CGROUP_PARENT``, or this process's own
cgroup when it was delegated); a set parent is always used, v1 or not. The starting process
joins the run's cgroups before exec'ing bwrap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from sandbox._cgroup2 import PARENT_ENV, CgroupV2, configured_parent, find_parent
from sandbox._policy import Limits
from segfactory.errors import SandboxError

log = logging.getLogger(__name__)
CGROUP_V1 = Path("/sys/fs/cgroup")
PARENT = "segfactory-sandbox"
CFS_PERIOD_US = 100_000  # cpu.cfs_period_us: quota = cpus * period
RMDIR_TIMEOUT_S = 10.0  # keep killing and retrying rmdir this long while the last processes exit
RMDIR_RETRY_S = 0.02
SHARES_PER_CPU = 1024  # cpu.shares of one nice-0 task
# Device-seconds are the sandbox's wall time, so a sandbox must get the cores it was allotted
# however busy the host is. In cgroup v1 a group competes with the root's tasks as ONE entity of
# weight cpu.shares: left at the default 1024, a 2-cpu ticket weighs as much as one stray host
# process and, at a host load of 8, ran 5-6x slower and past its budget (measured here). So the
# parent weighs as one nice-0 task per host core, and each run as one per allotted cpu.
PARENT_CPU_SHARES = SHARES_PER_CPU * (os.cpu_count() or 1)
STALE_AFTER_S = 600  # an empty run cgroup older than this is a leftover; removed at the next create
CONTROLLERS = ("memory", "pids", "cpu")
MEMORY_ENV = "SEGFACTORY_SANDBOX_MEMORY"  # "per-process": accept RLIMIT_DATA per process, no cgroup
PER_PROCESS = "per-process"


def per_process_memory_allowed() -> bool:
    """Whether the user opted out of a whole-sandbox memory limit (``SEGFACTORY_SANDBOX_MEMORY``)."""
    return os.environ.get(MEMORY_ENV, "").strip() == PER_PROCESS


def run_cgroup(limits: Limits) -> CgroupV1 | CgroupV2 | None:
    """The run's cgroup; None only when the user opted out. SandboxError (saying how to fix it)
    when no whole-sandbox limit can be set up and no opt-out was given."""
    if configured_parent() is None:
        v1 = CgroupV1.create(limits)
        if v1 is not None:
            return v1
    parent, why = find_parent()
    if parent is not None:
        return CgroupV2.create(parent, limits)
    if per_process_memory_allowed() and configured_parent() is None:
        log.warning("sandbox without a whole-sandbox memory limit (%s=%s): %s", MEMORY_ENV, PER_PROCESS, why)
        return None
    raise SandboxError(
        f"refusing to start a bwrap sandbox without a whole-sandbox memory limit: no writable cgroup v1 "
        f"hierarchy, and {why}. Run as root, delegate a cgroup2 subtree and set ${PARENT_ENV} "
        f"(docs/sandbox.md), or accept per-process limits with {MEMORY_ENV}={PER_PROCESS}"
    )


def delegate_v1(uid: int, gid: int) -> list[Path]:
    """As root: give ``uid`` the v1 parents ``<controller>/segfactory-sandbox`` so that a process of
    that user (the orchestrator after it drops root) can make run cgroups. Returns the dirs."""
    dirs = []
    for controller in CONTROLLERS:
        parent = CGROUP_V1 / controller / PARENT
        if not (CGROUP_V1 / controller).is_dir():
            continue
        parent.mkdir(exist_ok=True)
        for path in (parent, *(p for p in parent.iterdir() if p.is_file())):
            os.chown(path, uid, gid)
        dirs.append(parent)
    return dirs


class CgroupV1:
    """One run's cgroups. ``procs_files`` are what the starting process writes its pid into."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, limits: Limits) -> CgroupV1 | None:
        if not (CGROUP_V1 / "memory" / "memory.limit_in_bytes").exists() or not _v1_writable():
            return None
        remove_stale()
        run_id = uuid.uuid4().hex[:12]
        dirs = {c: CGROUP_V1 / c / PARENT / run_id for c in CONTROLLERS}
        try:
            for path in dirs.values():
                path.mkdir(parents=True)
            group = cls(dirs)
            group._apply(limits)
        except OSError:
            cls(dirs).remove()
            return None
        return group

    def _write(self, controller: str, name: str, value: int) -> None:
        (self.dirs[controller] / name).write_text(str(value))

    def _apply(self, limits: Limits) -> None:
        self._write("memory", "memory.limit_in_bytes", limits.memory_bytes)
        if (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
            self._write("memory", "memory.memsw.limit_in_bytes", limits.memory_bytes)
        self._write("memory", "memory.swappiness", 0)
        self._write("pids", "pids.max", limits.pids)
        self._write("cpu", "cpu.cfs_period_us", CFS_PERIOD_US)
        self._write("cpu", "cpu.cfs_quota_us", int(limits.cpus * CFS_PERIOD_US))
        self._write("cpu", "cpu.shares", max(2, int(limits.cpus * SHARES_PER_CPU)))
        with contextlib.suppress(PermissionError):  # a delegated parent may keep root's weight
            (self.dirs["cpu"].parent / "cpu.shares").write_text(str(PARENT_CPU_SHARES))

    @property
    def procs_files(self) -> list[str]:
        return [str(path / "cgroup.procs") for path in self.dirs.values()]

    def readback(self) -> dict[str, object]:
        """The limits as the kernel holds them, and whether the OOM killer fired."""
        read = {
            "memory": ("memory", "memory.limit_in_bytes"),
            "memsw": ("memory", "memory.memsw.limit_in_bytes"),
            "pids": ("pids", "pids.max"),
            "cpu_quota_us": ("cpu", "cpu.cfs_quota_us"),
            "cpu_shares": ("cpu", "cpu.shares"),
        }
        out: dict[str, object] = {"kind": "cgroup-v1"}
        for key, (controller, name) in read.items():
            with contextlib.suppress(OSError):
                out[key] = (self.dirs[controller] / name).read_text().strip()
        return out

    def oom_killed(self) -> bool:
        with contextlib.suppress(OSError):
            for line in (self.dirs["memory"] / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                    return True
        return False

    def kill_all(self) -> None:
        """SIGKILL every process still in the run's pids cgroup."""
        with contextlib.suppress(OSError):
            for pid in (self.dirs["pids"] / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove the run's cgroups; logs (and leaves) one that stays busy."""
        deadline = time.monotonic() + RMDIR_TIMEOUT_S
        for path in self.dirs.values():
            while path.exists():
                try:
                    path.rmdir()
                except OSError as exc:
                    if time.monotonic() > deadline:
                        log.warning("sandbox cgroup %s not removed: %s", path, exc)
                        break
                    self.kill_all()
                    time.sleep(RMDIR_RETRY_S)


def _v1_writable() -> bool:
    """Root, or every v1 parent delegated to this user (``delegate_v1``)."""
    if os.geteuid() == 0:
        return True
    return all(os.access(CGROUP_V1 / c / PARENT, os.W_OK | os.X_OK) for c in CONTROLLERS)


def remove_stale() -> None:
    """Remove empty run cgroups older than STALE_AFTER_S (left by a killed host process)."""
    now = time.time()
    for controller in CONTROLLERS:
        parent = CGROUP_V1 / controller / PARENT
        with contextlib.suppress(OSError):
            for path in parent.iterdir():
                if path.is_dir() and now - path.stat().st_mtime > STALE_AFTER_S:
                    with contextlib.suppress(OSError):
                        path.rmdir()  # fails (EBUSY) while any process is inside
