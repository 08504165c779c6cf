"""The docker backend (docker-py): the ticket policy in a container from the imported image.

network ``none``, read-only rootfs, tmpfs ``/tmp``, ``cap_drop=ALL``, ``no-new-privileges``, a
non-root uid, ``init``, pids/memory (memswap = memory)/cpu limits, RLIMIT_FSIZE, no log driver
(output is streamed through ``attach`` and capped by us, so a flood never reaches the disk).
``/work`` is a tmpfs volume the kernel caps in bytes and inodes, with the workspace copied in and
what the ticket left copied back (``sandbox._docker_work``): the host's workspace is never mounted.
Run as root, or as ``segfactory`` with the ticket identity root handed over at the drop
(``sandbox._identity``), the container runs as the sandbox uid; run as a developer in the docker
group, as that user's own uid.
Membership of the docker group is root-equivalent: with this backend the user separation of
trust rule 1 guards against mistakes, not a compromised orchestrator.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sandbox._base import EventHook, SandboxBackend, register_backend
from sandbox._capture import pump
from sandbox._docker_work import VOLUME_PREFIX, WorkVolume
from sandbox._identity import as_policy_uid
from sandbox._image import build_image
from sandbox._records import SandboxResult, SandboxSpec
from sandbox._session import Session
from segfactory.errors import SandboxError

PING_TIMEOUT_S = 5  # how long the engine has to answer
API_TIMEOUT_S = 60  # any other engine call
NOFILE = 4096
LABEL = "segfactory.sandbox"  # on every sandbox container
PID_LABEL = "segfactory.host_pid"  # "<pid namespace>:<pid>" of the process that owns it; dead -> removed
START_HINT = "start it with `sudo dockerd &` (or `sudo systemctl start docker`), or use --backend bwrap"


def engine_address() -> str:
    """Where the Docker engine answers: ``$DOCKER_HOST``, else docker-py's default unix socket."""
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_label() -> str:
    """This process as a container's owner. A pid means something only in its own PID namespace:
    a segfactory in a compose worker container sees none of the host's pids, and must not take
    a host run's sandboxes for orphans (it did, and removed them while they ran)."""
    return f"{_pid_namespace()}:{os.getpid()}"


def orphaned(label: str) -> bool:
    """True when the owner the label names is a dead process of this PID namespace; a container
    of another namespace is its own run's to clean up. A bare pid (older label) counts as ours."""
    namespace, _, pid = label.rpartition(":")
    if namespace and namespace != str(_pid_namespace()):
        return False
    return pid.isdigit() and int(pid) > 0 and not _alive(int(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@register_backend
class DockerBackend(SandboxBackend):
    name = "docker"
    _api: Any = None

    def api(self) -> Any:
        """A docker-py low-level client that has answered a ping; SandboxError otherwise."""
        if self._api is None:
            import docker

            try:
                client = docker.APIClient(base_url=engine_address(), timeout=PING_TIMEOUT_S, version="auto")
                client.ping()
            except Exception as exc:
                raise SandboxError(
                    f"the Docker engine does not answer ({type(exc).__name__}: {exc}); {START_HINT}"
                ) from exc
            client.timeout = API_TIMEOUT_S
            self._api = client
        return self._api

    def check_available(self) -> None:
        self.api()

    def ensure_image(self) -> None:
        """Build the image (docker import, no registry) when it is missing."""
        import docker.errors

        try:
            self.api().inspect_image(self.policy.image)
        except docker.errors.ImageNotFound:
            build_image(self.api(), self.policy)

    def _host_config(self, session: Session, work: WorkVolume) -> Any:
        from docker.types import LogConfig, Ulimit

        limits = session.limits
        binds = {
            str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
            for m in session.mounts
            if m.source != session.workspace
        }
        binds["/usr"] = {"bind": "/usr", "mode": "ro"}
        gpus = {"device_requests": session.gpu.docker_device_requests()} if session.gpu.gpus else {}
        return self.api().create_host_config(
            binds=binds,
            mounts=[work.mount()],
            network_mode="none",
            read_only=True,
            init=True,
            tmpfs={"/tmp": f"size={limits.tmp_bytes},mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            pids_limit=limits.pids,
            nano_cpus=int(limits.cpus * 1e9),
            cpu_shares=max(2, int(limits.cpus * 1024)),
            log_config=LogConfig(type=LogConfig.types.NONE),
            ulimits=[
                Ulimit(name="fsize", soft=limits.file_bytes, hard=limits.file_bytes),
                Ulimit(name="core", soft=0, hard=0),
                Ulimit(name="nofile", soft=NOFILE, hard=NOFILE),
            ],
            **gpus,
        )

    def remove_orphans(self) -> list[str]:
        """Remove sandbox containers, then /work volumes, whose host process died (killed before
        its own cleanup).

        Another run on this host may be removing the same orphan at the same moment: one already
        gone is not an error."""
        import docker.errors

        removed = []
        for item in self.api().containers(all=True, filters={"label": LABEL}):
            if orphaned(item.get("Labels", {}).get(PID_LABEL, "0")):
                try:
                    self.api().remove_container(item["Id"], force=True)
                except docker.errors.NotFound:
                    continue
                removed.append(item["Id"])
        for volume in self.api().volumes(filters={"label": LABEL}).get("Volumes") or []:
            name = volume.get("Name", "")
            if name.startswith(VOLUME_PREFIX) and orphaned((volume.get("Labels") or {}).get(PID_LABEL, "0")):
                try:
                    self.api().remove_volume(name, force=True)
                except docker.errors.APIError:  # gone, or still held by a container going away
                    continue
                removed.append(name)
        return removed

    def run(self, spec: SandboxSpec, on_event: EventHook | None = None) -> SandboxResult:
        self.ensure_image()
        self.remove_orphans()
        labels = {LABEL: "1", PID_LABEL: owner_label()}
        with Session(spec, self.policy, on_event) as session:
            with WorkVolume(self.api(), session, self.policy.image, self.container_user(), labels) as work:
                return self._create_and_run(session, work, labels)

    def _create_and_run(self, session: Session, work: WorkVolume, labels: dict[str, str]) -> SandboxResult:
        api = self.api()
        container = api.create_container(
            self.policy.image,
            command=session.inner_command,
            user=self.container_user(),
            working_dir="/work",
            environment=session.env,
            host_config=self._host_config(session, work),
            network_disabled=True,
            labels=labels,
            stdin_open=False,
            tty=False,
        )
        try:
            result = self._run(api, container["Id"], session, work)
        finally:
            api.remove_container(container["Id"], force=True)
        if session.killed_for is None:  # as with bwrap: a ticket the host killed leaves nothing
            work.copy_back(session.workspace, session.limits)
        return result

    def container_user(self) -> str:
        """``uid:gid`` inside the container: the policy's as root or with the ticket identity
        (``sandbox._identity``), else the caller's own (a developer in the docker group), never 0."""
        if as_policy_uid():
            return f"{self.policy.uid}:{self.policy.gid}"
        return f"{os.geteuid()}:{os.getegid()}"

    def _run(self, api: Any, cid: str, session: Session, work: WorkVolume) -> SandboxResult:
        stream = api.attach(cid, stdout=True, stderr=True, stream=True, demux=True)

        def sink(chunk: tuple[bytes | None, bytes | None]) -> None:
            if chunk[0]:
                session.stdout.write(chunk[0])
            if chunk[1]:
                session.stderr.write(chunk[1])

        start = time.monotonic()
        try:
            api.start(cid)
        except Exception as exc:
            if session.gpu.gpus and "nvidia" in str(exc).lower():
                raise SandboxError(
                    f"docker could not pass GPU {session.gpu.minors} to the sandbox: {exc}; install the "
                    "NVIDIA container toolkit (nvidia-ctk runtime configure --runtime=docker), or "
                    "use --backend bwrap"
                ) from exc
            raise SandboxError(
                f"docker could not start the sandbox from {self.policy.image}: {exc}; "
                "rebuild it with `segfactory sandbox build`"
            ) from exc
        reader = pump(stream, sink)  # type: ignore[arg-type]
        work.watch(session.spec.live)
        state: dict[str, object] = {}

        def ended(seconds: float) -> bool:
            state.update(api.inspect_container(cid)["State"])
            if state["Running"] or state.get("Status") == "created":
                time.sleep(seconds)
                return False
            return True

        killed = session.supervise(ended, lambda: api.kill(cid))
        result = api.wait(cid, timeout=API_TIMEOUT_S)
        reader.join(timeout=API_TIMEOUT_S)
        duration = time.monotonic() - start
        final = api.inspect_container(cid)["State"]
        exit_code = int(result.get("StatusCode", final.get("ExitCode", -1)))
        return SandboxResult(
            backend=self.name,
            exit_code=exit_code,
            stdout=session.stdout.output(),
            stderr=session.stderr.output(),
            timed_out=session.timed_out(exit_code, duration, killed),
            oom_killed=bool(final.get("OOMKilled")),
            duration_s=duration,
            events=session.finish(),
        )

    def limit_evidence(self) -> dict[str, object]:
        return {"kind": "docker-hostconfig"}
