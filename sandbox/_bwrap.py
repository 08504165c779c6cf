"""The bwrap backend: the ticket policy without a daemon (bubblewrap user namespaces).

``--unshare-all`` (network, pid, ipc, uts, cgroup, user namespaces) with no further user namespaces
inside (``--disable-userns``), ``--die-with-parent``,
``--new-session``, ``--cap-drop ALL``, a non-zero uid, a root that is remounted read-only, the
host's ``/usr`` read-only, a minimal ``/etc``, a sized tmpfs ``/tmp``, and, as root or with the
ticket identity, a ``/work`` tmpfs sized in bytes and inodes (``WORK_ON_TMPFS``); rlimits via ``prlimit``;
memory/pids/cpu for the whole sandbox through a cgroup, v1 or v2 (``sandbox._cgroup``): no
sandbox starts without one unless the user opted out. Started as root, or as ``segfactory`` with
the ticket identity root handed over (``sandbox._identity``), the sandbox drops to the policy uid
on the host too (``setpriv``) before bwrap makes its namespaces.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox._base import EventHook, SandboxBackend, register_backend
from sandbox._capture import pump
from sandbox._cgroup import CgroupV1, run_cgroup
from sandbox._cgroup2 import CgroupV2
from sandbox._identity import ENTER as ENTER_IDENTITY
from sandbox._identity import as_policy_uid, give_workspace, identity_fd, take_back
from sandbox._records import SandboxResult, SandboxSpec
from sandbox._session import Session
from segfactory.errors import SandboxError

NOFILE = 4096  # open files inside
PUMP_JOIN_S = 10.0  # wait for the output pumps after the process ended
USR_LINKS = {"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"}
BIND_STAGED = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 125; shift 2; done; shift; '
# the same inside the ticket identity: its descriptor (standard input) is replaced first, so the
# sandbox never holds it; --rbind, since mounts inherited from the host's namespace are locked
BIND_IN_IDENTITY = (
    'exec </dev/null; while [ "$1" != -- ]; do mount --rbind "$1" "$2" || exit 125; shift 2; done; shift; '
)
# Then /work: a tmpfs of the stager's own, sized in bytes and inodes, so the kernel refuses a
# write past the cap (a host filesystem shared with the audit log and the vault is never filled).
# The workspace is copied in, the sandbox runs as a child, and what it left is copied back over
# the workspace once its pid namespace has died, so nothing of it runs while the copy is made.
# Arguments: WORKSPACE STAGE TMPFS-OPTIONS -- COMMAND...
WORK_ON_TMPFS = (
    'work=$1 stage=$2; mount -t tmpfs -o "$3" segfactory-work "$stage" || exit 125; shift 4; '
    'cp -a -- "$work/." "$stage/" || exit 125; '
    '"$@"; rc=$?; '
    'find "$work" -mindepth 1 -delete && cp -a -- "$stage/." "$work/" || '
    '{ echo "segfactory: what the sandbox left in /work could not be copied back" >&2; exit 125; }; '
    "exit $rc"
)
STAGE_MOUNTS = BIND_STAGED + WORK_ON_TMPFS
STAGE_IN_IDENTITY = BIND_IN_IDENTITY + WORK_ON_TMPFS
JOIN_CGROUPS = 'for f in $SEGFACTORY_CGROUPS; do echo $$ > "$f" || exit 125; done; exec "$@"'


@register_backend
class BwrapBackend(SandboxBackend):
    name = "bwrap"
    _last_limits: dict[str, object] = {}

    def check_available(self) -> None:
        if shutil.which("bwrap") is None:
            raise SandboxError(
                "bubblewrap is not installed: `apt-get install bubblewrap`, or use --backend docker"
            )

    def limit_evidence(self) -> dict[str, object]:
        return dict(self._last_limits)

    def _bwrap_args(self, session: Session, staged: dict[Path, Path], info_fd: int) -> list[str]:
        uid, gid = str(self.policy.uid), str(self.policy.gid)
        # --disable-userns (bwrap >= 0.8; it needs an explicit --unshare-user) sets the sandbox's
        # user.max_user_namespaces to 0: code inside cannot make a user namespace of its own and,
        # with it, reach kernel interfaces closed to an unprivileged user; --assert-userns-disabled
        # makes bwrap fail rather than start a sandbox where that did not hold.
        args = [
            "bwrap",
            "--info-fd",
            str(info_fd),
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--assert-userns-disabled",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--uid",
            uid,
            "--gid",
            gid,
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for link, target in USR_LINKS.items():
            args += ["--symlink", target, link]
        args += [
            "--ro-bind",
            str(session.tmp / "etc"),
            "/etc",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *session.gpu.bwrap_args(),
            "--size",
            str(session.limits.tmp_bytes),
            "--tmpfs",
            "/tmp",
        ]
        for mount in session.mounts:
            source = staged.get(mount.source, mount.source)
            args += ["--ro-bind" if mount.read_only else "--bind", str(source), mount.target]
        args += ["--remount-ro", "/", "--chdir", "/work", "--clearenv"]
        for key, value in session.env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *session.inner_command]

    def _prlimit_args(self, session: Session, cgroup: CgroupV1 | CgroupV2 | None) -> list[str]:
        limits = session.limits
        args = ["prlimit", f"--fsize={limits.file_bytes}", "--core=0", f"--nofile={NOFILE}"]
        if cgroup is None:  # no cgroup: memory by RLIMIT_DATA, processes by RLIMIT_NPROC (not for root)
            args += [f"--data={limits.memory_bytes}", f"--nproc={limits.pids}"]
        return [*args, "--"]

    def run(self, spec: SandboxSpec, on_event: EventHook | None = None) -> SandboxResult:
        self.check_available()
        with Session(spec, self.policy, on_event) as session:
            cgroup = run_cgroup(session.limits)  # SandboxError rather than per-process memory limits
            try:
                return self._run(session, cgroup)
            finally:
                if cgroup is not None:
                    cgroup.kill_all()
                    cgroup.remove()
                take_back(session.workspace)  # every sandbox process has ended

    def _drop_root(self, session: Session) -> tuple[list[str], dict[Path, Path], int | None, Path | None]:
        """As root, or holding the ticket identity: the command prefix that makes the sandbox run
        as the policy uid on the host too (``sandbox._identity``).

        bwrap then runs unprivileged, so the sandbox is neither host root nor the orchestrator
        outside its user namespace (RLIMIT_NPROC applies, files it writes belong to the sandbox
        uid). Mount sources whose parents the uid cannot search (``/root/.pyenv``, the home) are
        first bind-mounted onto staging dirs in a private mount namespace that only this run
        sees; nothing on the host has its permissions loosened. The workspace is not bound: it
        is copied onto a size- and inode-capped tmpfs there (``WORK_ON_TMPFS``). Returns (prefix
        argv, {source: staged path}, the descriptor the prefix needs on its standard input, the
        staged /work); without root or the identity, ([], {}, None, None).
        """
        if not as_policy_uid():
            return [], {}, None, None
        give_workspace(session.workspace, self.policy.uid, self.policy.gid)
        staged, pairs = {}, []
        for index, mount in enumerate(session.mounts):
            target = session.tmp / "stage" / str(index)
            target.parent.mkdir(exist_ok=True)
            target.mkdir() if mount.source.is_dir() else target.touch()
            staged[mount.source] = target
            if mount.source != session.workspace:
                pairs += [str(mount.source), str(target)]
        work = staged[session.workspace]
        limits, uid, gid = session.limits, self.policy.uid, self.policy.gid
        tmpfs = (
            f"size={limits.workspace_bytes},nr_inodes={limits.workspace_files},mode=0700,uid={uid},gid={gid}"
        )
        setpriv = [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--no-new-privs",
            "--",
        ]
        fd = identity_fd()
        enter, script = ([], STAGE_MOUNTS) if fd is None else (ENTER_IDENTITY, STAGE_IN_IDENTITY)
        # the stager stays between this process and bwrap (to copy /work back), so it dies with
        # this process as bwrap would (--die-with-parent): a kill -9 of the run ends the ticket.
        # Set after nsenter, whose change of user namespace would clear it.
        dies = ["setpriv", "--pdeathsig", "KILL", "--"]
        stage = [*dies, "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"]
        workspace = [str(session.workspace), str(work), tmpfs, "--"]
        return [*enter, *stage, *pairs, "--", *workspace, *setpriv], staged, fd, work

    def _start(
        self, session: Session, cgroup: CgroupV1 | CgroupV2 | None
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Start the wrapper chain; returns the process and the read end of bwrap's info pipe."""
        prefix, staged, identity, work = self._drop_root(session)
        info_r, info_w = os.pipe()
        argv = [*self._prlimit_args(session, cgroup), *prefix, *self._bwrap_args(session, staged, info_w)]
        env = {"PATH": "/usr/bin:/bin"}
        if cgroup is not None:
            argv = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *argv]
            env["SEGFACTORY_CGROUPS"] = " ".join(cgroup.procs_files)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL if identity is None else identity,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                pass_fds=(info_w,),
            )
        finally:
            os.close(info_w)
        if work is not None:  # every wrapper execs in place: the stager keeps this pid
            session.mount_live(Path(f"/proc/{proc.pid}/root") / work.relative_to("/"))
        return proc, info_r

    def _run(self, session: Session, cgroup: CgroupV1 | CgroupV2 | None) -> SandboxResult:
        start = time.monotonic()
        proc, info_r = self._start(session, cgroup)
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [pump(proc.stdout, session.stdout.write), pump(proc.stderr, session.stderr.write)]

        def kill() -> None:
            os.killpg(proc.pid, signal.SIGKILL)
            if cgroup is not None:
                cgroup.kill_all()

        with _exit_waiter(proc) as wait:
            killed = session.supervise(wait, kill)
        exit_code = _exit_status(proc.wait())
        for thread in pumps:
            thread.join(PUMP_JOIN_S)
        duration = time.monotonic() - start
        with os.fdopen(info_r, "rb") as info:
            if not info.read() and not killed:  # bwrap never reached the command
                stderr = session.stderr.output().data[-2000:].decode(errors="replace").strip()
                raise SandboxError(f"bwrap could not start the sandbox (exit {exit_code}): {stderr}")
        self._last_limits = cgroup.readback() if cgroup else {"kind": "rlimit"}
        return SandboxResult(
            backend=self.name,
            exit_code=exit_code,
            stdout=session.stdout.output(),
            stderr=session.stderr.output(),
            timed_out=session.timed_out(exit_code, duration, killed),
            oom_killed=bool(cgroup and cgroup.oom_killed()),
            duration_s=duration,
            events=session.finish(),
        )


@contextlib.contextmanager
def _exit_waiter(proc: subprocess.Popen[bytes]) -> Iterator[Callable[[float], bool]]:
    """``wait(t)``: True once ``proc`` ended, blocking at most t seconds. A pidfd wakes at once
    (``Popen.wait(timeout)`` polls with sleeps of up to 50 ms, which is most of a short run)."""
    pidfd = os.pidfd_open(proc.pid)
    try:

        def wait(seconds: float) -> bool:
            select.select([pidfd], [], [], seconds)
            return proc.poll() is not None

        yield wait
    finally:
        os.close(pidfd)


def _exit_status(returncode: int) -> int:
    """Shell convention: a signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
