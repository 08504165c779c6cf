"""One sandbox run's host-side state, shared by every backend.

A Session validates the spec against the policy and the mount rules (before anything starts),
prepares a private temp dir (decoys, a minimal /etc) and the audit hook's socket, watches the
decoys, listens to the hook, and collects events. Backends start the process; ``supervise``
enforces the wall time from outside, and kills a sandbox whose ``/work`` is full.

Where a backend gives ``/work`` a tmpfs of its own (bwrap as root or with the ticket identity:
``sandbox._bwrap``), the kernel caps its bytes and inodes and ``live_workspace`` says where the
host reaches it while the sandbox runs; elsewhere the host's workspace is measured by a walk,
which a fast writer can outrun between two polls.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sandbox._capture import CappedBuffer
from sandbox._decoys import create_decoys
from sandbox._hook import HookListener
from sandbox._inotify import DecoyWatcher
from sandbox._layout import (
    EVENTS_TARGET,
    HOOK_SOCKET_NAME,
    WORKSPACE_TARGET,
    Mount,
    runtime_mounts,
    sandbox_env,
    write_etc,
)
from sandbox._paths import check_mountable
from sandbox._policy import Limits, SandboxPolicy, check_within
from sandbox._records import SandboxEvent, SandboxSpec
from segfactory.errors import PolicyError
from segfactory.gpus import plan_gpus

EventHook = Callable[[SandboxEvent], None]
SCRATCH_ROOTS = (Path("/dev/shm"),)  # tmpfs for the per-run dir (decoys are sparse, the rest tiny)
SUPERVISE_POLL_S = 0.05  # how often the supervisor looks at the process
WORKSPACE_POLL_S = 0.25  # how often /work's disk use is measured by a walk (a statvfs: every poll)
OUTER_KILL_SLACK_S = 2.0  # after timeout + grace the host kills, whatever the inner timeout did

_LIVE: dict[Path, Path] = {}  # host workspace -> where its sandbox's own /work is reached, while it runs
_LIVE_LOCK = threading.Lock()


def live_workspace(workspace: Path) -> Path:
    """Where a running sandbox's ``/work`` is read from the host: its kernel-capped tmpfs when the
    backend made one (reached through the stager's ``/proc/<pid>/root``), else ``workspace``
    itself. What is read there is the sandbox's, as untrusted as the workspace after the run."""
    with _LIVE_LOCK:
        return _LIVE.get(Path(workspace).resolve(), Path(workspace))


def _scratch_root() -> str | None:
    """A tmpfs for per-run scratch where one is writable (creating and removing dirs on a busy
    disk costs ~4 ms each), else the system temp dir."""
    for root in SCRATCH_ROOTS:
        if root.is_dir() and os.access(root, os.W_OK | os.X_OK):
            return str(root)
    return None


def disk_usage(root: Path) -> tuple[int, int]:
    """(bytes of disk, entries) under ``root``: st_blocks, and every file, directory and link
    (each an inode, whatever its size); symlinks not followed."""
    total, files = 0, 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        files += len(entries)
        for entry in entries:
            try:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
            except OSError:
                continue
    return total, files


def tmpfs_usage(live: Path) -> tuple[int, int, bool]:
    """(bytes used, inodes used, full) of the tmpfs mounted at ``live``: full when no block or no
    inode is left. Before the stager has mounted it, or once it has ended, ``live`` is no mount
    point (the same device as its parent): (0, 0, False)."""
    try:
        if os.stat(live).st_dev == os.stat(live.parent).st_dev:
            return 0, 0, False
        fs = os.statvfs(live)
    except OSError:
        return 0, 0, False
    used = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return used, fs.f_files - fs.f_ffree, fs.f_bfree == 0 or fs.f_ffree == 0


class Session:
    """Host-side state of one run; use as a context manager (cleans its temp dir)."""

    def __init__(self, spec: SandboxSpec, policy: SandboxPolicy, on_event: EventHook | None) -> None:
        self.spec, self.policy, self._on_event = spec, policy, on_event
        self.limits: Limits = spec.limits or policy.defaults
        check_within(self.limits, policy.maxima)
        self.timeout_s = spec.timeout_s or self.limits.timeout_s
        if self.timeout_s > policy.maxima.timeout_s:
            raise PolicyError(
                f"sandbox timeout {self.timeout_s}s is above the policy maximum {policy.maxima.timeout_s}s"
            )
        self.workspace = self._existing_dir(spec.workspace, "the workspace")
        self.mounts = self._plan_mounts()
        self.gpu = plan_gpus(spec.gpus, control_nodes=policy.gpu_control_nodes)
        self.events: list[SandboxEvent] = []
        self.stdout = CappedBuffer(policy.output.stdout_bytes)
        self.stderr = CappedBuffer(policy.output.stderr_bytes)
        self.env: dict[str, str] = {}  # set on entering, once the mount plan is whole
        self.tmp = Path(tempfile.mkdtemp(prefix="sbx-", dir=_scratch_root()))
        self.events_dir = Path(tempfile.mkdtemp(prefix="sbx-events-"))  # holds the hook's socket; ro inside
        self.watcher: DecoyWatcher | None = None
        self.hook: HookListener | None = None
        self.live: Path | None = None  # set by a backend that gave /work a kernel-capped tmpfs
        self._fill: Callable[[], tuple[int, int, bool]] | None = None  # that tmpfs: (bytes, inodes, full)
        self.killed_for: str | None = None  # "timeout" or "workspace" once supervise killed it
        self._finished = False

    @staticmethod
    def _existing_dir(path: Path, role: str) -> Path:
        real = check_mountable(path, role)
        if not real.is_dir():
            raise PolicyError(f"{role} {path} is not an existing directory")
        return real

    def _plan_mounts(self) -> list[Mount]:
        mounts = runtime_mounts()
        for name, path in self.spec.data.items():
            mounts.append(Mount(self._existing_dir(path, f"data '{name}'"), f"/data/{name}"))
        for target, path in self.spec.extra_ro.items():
            real = check_mountable(path, f"extra_ro {target}")
            if not real.exists():
                raise PolicyError(f"extra_ro source {path} does not exist")
            mounts.append(Mount(real, target))
        return mounts

    def __enter__(self) -> Session:
        os.chmod(self.tmp, 0o755)
        write_etc(self.tmp / "etc", self.policy.uid, self.policy.gid)
        os.chmod(self.events_dir, 0o755)
        self.mounts.append(Mount(self.events_dir, EVENTS_TARGET))
        if self.spec.decoys:
            decoy_mounts, files = create_decoys(self.tmp)  # mounted from neutral names: /<tmp>/vault
            self.mounts.extend(decoy_mounts)
            self.watcher = DecoyWatcher(files, self.emit)
        self.mounts.append(Mount(self.workspace, WORKSPACE_TARGET, read_only=False))
        # the caller's env cannot widen the GPUs assigned or change what the hook treats as ordinary
        self.env = {**sandbox_env(self.spec.env, self.mounts), **self.gpu.env()}
        self.hook = HookListener(self.events_dir / HOOK_SOCKET_NAME, self._sender_uids(), self.emit)
        return self

    def _sender_uids(self) -> set[int]:
        """The uids the sandbox's processes have as this host sees them: the policy's when we
        are root (bwrap drops to it, docker runs as it), else our own (a user namespace maps
        the sandbox's uid to ours; docker runs as our uid)."""
        return {self.policy.uid, os.geteuid()}

    def mount_live(self, live: Path, fill: Callable[[], tuple[int, int, bool]] | None = None) -> None:
        """The backend gave ``/work`` a tmpfs of its own, capped by the kernel; the host reads
        it (or the ``live`` files it copies) at ``live`` until the sandbox ends
        (``live_workspace``). ``fill``: (bytes, inodes used, full) of that tmpfs, by default
        ``tmpfs_usage(live)``."""
        self.live = live
        self._fill = fill or (lambda: tmpfs_usage(live))
        with _LIVE_LOCK:
            _LIVE[self.workspace] = live

    def __exit__(self, *exc: object) -> None:
        with _LIVE_LOCK:
            if self.live is not None and _LIVE.get(self.workspace) == self.live:
                del _LIVE[self.workspace]
        self.finish()
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.events_dir, ignore_errors=True)

    def finish(self) -> list[SandboxEvent]:
        """Stop watching, read the audit hook's file; returns every event (call once it ended)."""
        if self._finished:
            return self.events
        self._finished = True
        if self.watcher is not None:
            self.watcher.stop()
        if self.hook is not None:
            self.hook.stop()
        return self.events

    def emit(self, event: SandboxEvent) -> None:
        """Record an event and pass it to the caller's hook (the audit log)."""
        self.events.append(event)
        if self._on_event is not None:
            self._on_event(event)

    @property
    def inner_command(self) -> list[str]:
        """The command wrapped in the in-sandbox ``nice`` and ``timeout -k`` (coreutils, from /usr)."""
        grace = f"{self.policy.kill_grace_s:g}"
        timed = ["/usr/bin/timeout", "-k", grace, f"{self.timeout_s:g}", *self.spec.command]
        return ["/usr/bin/nice", "-n", str(self.policy.nice), *timed] if self.policy.nice else timed

    def supervise(self, wait: Callable[[float], bool], kill: Callable[[], None]) -> bool:
        """Wait for the end (``wait(t)``: True once ended, blocking at most t seconds); kill on the
        outer deadline or a full /work. Returns True if it killed at the deadline."""
        start = time.monotonic()
        deadline = start + self.timeout_s + self.policy.kill_grace_s + OUTER_KILL_SLACK_S
        next_du = start + WORKSPACE_POLL_S
        while not wait(SUPERVISE_POLL_S):
            now = time.monotonic()
            if now >= deadline:
                self.emit(
                    SandboxEvent(kind="timeout_kill", ts=time.time(), detail={"timeout_s": self.timeout_s})
                )
                self.killed_for = "timeout"
                kill()
                return True
            if now >= next_du or self._fill is not None:
                next_du = now + WORKSPACE_POLL_S
                if self._workspace_full():
                    self.killed_for = "workspace"
                    kill()
                    return False
        return False

    def _workspace_full(self) -> bool:
        """True (and an event) when /work is full: its tmpfs has no block or inode left (the
        kernel refused the write past the cap), or, measured by a walk, it has grown past the cap."""
        limits = self.limits
        if self._fill is not None:
            used, files, full = self._fill()
        else:
            used, files = disk_usage(self.workspace)
            full = used > limits.workspace_bytes or files > limits.workspace_files
        if not full:
            return False
        detail = {
            "used_bytes": used,
            "limit_bytes": limits.workspace_bytes,
            "files": files,
            "limit_files": limits.workspace_files,
            "enforced_by": "kernel" if self._fill is not None else "walk",
        }
        self.emit(SandboxEvent(kind="workspace_limit", ts=time.time(), path="/work", detail=detail))
        return True

    def timed_out(self, exit_code: int, duration_s: float, killed: bool) -> bool:
        """Whether the run hit its wall time: killed from outside, or ended by the inner timeout."""
        return killed or (exit_code in (124, 137) and duration_s >= self.timeout_s)
