"""The bwrap backend: the ticket policy without a daemon (bubblewrap user namespaces).

``--unshare-all`` (network, pid, ipc, uts, cgroup, user namespaces), ``--die-with-parent``,
``--new-session``, ``--cap-drop ALL``, a non-zero uid, a root that is remounted read-only, the
host's ``/usr`` read-only, a minimal ``/etc``, a sized tmpfs ``/tmp``; rlimits via ``prlimit``;
memory/pids/cpu through cgroup v1 where writable (``sandbox._cgroup``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from sandbox._base import EventHook, SandboxBackend, register_backend
from sandbox._cgroup import CgroupV1
from sandbox._records import SandboxResult, SandboxSpec
from sandbox._session import Session
from segfactory.errors import SandboxError

NOFILE = 4096  # open files inside
USR_LINKS = {"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"}
JOIN_CGROUPS = 'for f in $SEGFACTORY_CGROUPS; do echo $$ > "$f" || exit 125; done; exec "$@"'


@register_backend
class BwrapBackend(SandboxBackend):
    name = "bwrap"
    _last_limits: dict[str, object] = {}

    def check_available(self) -> None:
        if shutil.which("bwrap") is None:
            raise SandboxError("bubblewrap is not installed: `apt-get install bubblewrap`, or use --backend docker")

    def limit_evidence(self) -> dict[str, object]:
        return dict(self._last_limits)

    def _bwrap_args(self, session: Session) -> list[str]:
        uid, gid = str(self.policy.uid), str(self.policy.gid)
        args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--uid", uid, "--gid", gid, "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
        for link, target in USR_LINKS.items():
            args += ["--symlink", target, link]
        args += ["--ro-bind", str(session.tmp / "etc"), "/etc", "--proc", "/proc", "--dev", "/dev",
                 "--size", str(session.limits.tmp_bytes), "--tmpfs", "/tmp"]
        for mount in session.mounts:
            args += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target]
        args += ["--remount-ro", "/", "--chdir", "/work", "--clearenv"]
        for key, value in session.env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *session.inner_command]

    def _prlimit_args(self, session: Session, cgroup: CgroupV1 | None) -> list[str]:
        limits = session.limits
        args = ["prlimit", f"--fsize={limits.file_bytes}", "--core=0", f"--nofile={NOFILE}"]
        if cgroup is None:  # no cgroup: memory by RLIMIT_DATA, processes by RLIMIT_NPROC (not for root)
            args += [f"--data={limits.memory_bytes}", f"--nproc={limits.pids}"]
        return [*args, "--"]

    def run(self, spec: SandboxSpec, on_event: EventHook | None = None) -> SandboxResult:
        self.check_available()
        with Session(spec, self.policy, on_event) as session:
            cgroup = CgroupV1.create(session.limits)
            try:
                return self._run(session, cgroup)
            finally:
                if cgroup is not None:
                    cgroup.kill_all()
                    cgroup.remove()

    def _run(self, session: Session, cgroup: CgroupV1 | None) -> SandboxResult:
        argv = [*self._prlimit_args(session, cgroup), *self._bwrap_args(session)]
        env = {"PATH": "/usr/bin:/bin"}
        if cgroup is not None:
            argv = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *argv]
            env["SEGFACTORY_CGROUPS"] = " ".join(cgroup.procs_files)
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True, close_fds=True)
        assert proc.stdout is not None and proc.stderr is not None
        from sandbox._capture import pump

        pumps = [pump(proc.stdout, session.stdout.write), pump(proc.stderr, session.stderr.write)]

        def kill() -> None:
            os.killpg(proc.pid, signal.SIGKILL)
            if cgroup is not None:
                cgroup.kill_all()

        def wait(seconds: float) -> bool:
            try:
                proc.wait(seconds)
            except subprocess.TimeoutExpired:
                return False
            return True

        killed = session.supervise(wait, kill)
        exit_code = _exit_status(proc.wait())
        for thread in pumps:
            thread.join()
        duration = time.monotonic() - start
        self._last_limits = cgroup.readback() if cgroup else {"kind": "rlimit"}
        return SandboxResult(
            backend=self.name, exit_code=exit_code, stdout=session.stdout.output(),
            stderr=session.stderr.output(), timed_out=session.timed_out(exit_code, duration, killed),
            oom_killed=bool(cgroup and cgroup.oom_killed()), duration_s=duration, events=session.finish(),
        )


def _exit_status(returncode: int) -> int:
    """Shell convention: a signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
