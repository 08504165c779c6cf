"""The docker backend's ``/work``: a tmpfs volume whose bytes and inodes the kernel caps.

The host's workspace is never mounted into a ticket's container. Each run makes a local volume of
type tmpfs (``size=``, ``nr_inodes=``), and a holder container keeps it mounted for the run's life
(``sleep``; no network, no capability, 64 MiB, 16 processes). Through the engine's archive API the
workspace is copied in before the ticket starts; while it runs, the spec's ``live`` files (at most
``LIVE_CAP_BYTES`` each) and the tmpfs's fill are read from the holder every ``LIVE_POLL_S``; once
its container has ended, what it left is copied back over the workspace. That copy follows no
link, writes nothing outside the workspace, makes no device and stops past the cap. The holder
and the volume are removed afterwards, or by a later run as orphans when their owner died.

A ticket the host killed (its wall, a full ``/work``) gets nothing copied back, as with bwrap.
"""

from __future__ import annotations

import io
import secrets
import shutil
import tarfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from sandbox._policy import Limits
from sandbox._session import Session
from segfactory.errors import SandboxError
from segfactory.files import write_atomic

LIVE_POLL_S = 1.0  # how often the live files and /work's fill are read from the holder
LIVE_CAP_BYTES = 256 * 1024  # of one live file
HOLDER_MEMORY_BYTES = 64 * 1024**2
HOLDER_PIDS = 16
TAR_MEMBER_BYTES = 1536  # a member's header and padding at most: the copy-back's cap counts them
VOLUME_PREFIX = "segfactory-work-"
WORK = "/work"


class _Chunks(io.RawIOBase):
    """The engine's archive stream as a file, refused past ``cap`` bytes."""

    def __init__(self, chunks: Iterable[bytes], cap: int) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer, self._left = b"", cap

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._buffer))
        self._left -= size
        if self._left < 0:
            raise SandboxError("what the sandbox left in /work is larger than its cap allows")
        target[:size], self._buffer = self._buffer[:size], self._buffer[size:]
        return size


def _beneath_work(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """``work/<name>`` as ``<name>``, through tarfile's ``tar`` filter (nothing outside ``dest``,
    through a link or otherwise; no setuid bit); no device node; anything refused is skipped."""
    parts = PurePosixPath(member.name).parts
    if len(parts) < 2 or parts[0] != "work" or member.ischr() or member.isblk():
        return None
    linkname = member.linkname
    if member.islnk():  # a hard link names another member: work/<name> too
        link = PurePosixPath(linkname).parts
        if len(link) < 2 or link[0] != "work":
            return None
        linkname = str(PurePosixPath(*link[1:]))
    renamed = member.replace(name=str(PurePosixPath(*parts[1:])), linkname=linkname, deep=False)
    try:
        return tarfile.tar_filter(renamed, dest)
    except tarfile.FilterError:
        return None


def _empty(folder: Path) -> None:
    """Remove everything in ``folder`` (host-made inputs; no link is followed)."""
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


class WorkVolume:
    """One run's tmpfs volume and its holder; use as a context manager."""

    def __init__(self, api: Any, session: Session, image: str, user: str, labels: dict[str, str]) -> None:
        self.api, self.session, self.image, self.user, self.labels = api, session, image, user, labels
        self.name = VOLUME_PREFIX + secrets.token_hex(8)
        self.holder: str | None = None
        self._fill = (0, 0, False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WorkVolume:
        limits, (uid, gid) = self.session.limits, self.user.split(":")
        options = (
            f"size={limits.workspace_bytes},nr_inodes={limits.workspace_files},uid={uid},gid={gid},mode=0700"
        )
        try:
            self.api.create_volume(
                self.name,
                driver="local",
                driver_opts={"type": "tmpfs", "device": "tmpfs", "o": options},
                labels=self.labels,
            )
            self.holder = self.api.create_container(
                self.image,
                command=["/usr/bin/sleep", "infinity"],
                user=self.user,
                host_config=self._holder_config(),
                network_disabled=True,
                labels=self.labels,
            )["Id"]
            self.api.start(self.holder)
            self.api.put_archive(self.holder, WORK, self._workspace_tar(int(uid), int(gid)))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=LIVE_POLL_S + 10)
        if self.holder is not None:
            self.api.remove_container(self.holder, force=True)
        try:
            self.api.remove_volume(self.name, force=True)
        except Exception:  # never made, or the engine went away: a later run removes the orphan
            pass

    def _holder_config(self) -> Any:
        from docker.types import LogConfig

        return self.api.create_host_config(
            binds={"/usr": {"bind": "/usr", "mode": "ro"}},
            mounts=[self.mount()],
            network_mode="none",
            read_only=True,
            init=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=HOLDER_MEMORY_BYTES,
            memswap_limit=HOLDER_MEMORY_BYTES,
            pids_limit=HOLDER_PIDS,
            log_config=LogConfig(type=LogConfig.types.NONE),
        )

    def _workspace_tar(self, uid: int, gid: int) -> bytes:
        """The host's workspace (host-written inputs) as a tar whose files the container user owns."""

        def owned(member: tarfile.TarInfo) -> tarfile.TarInfo:
            member.uid, member.gid, member.uname, member.gname = uid, gid, "", ""
            return member

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(self.session.workspace, arcname=".", recursive=False, filter=owned)
            for child in sorted(self.session.workspace.iterdir()):
                tar.add(child, arcname=child.name, filter=owned)
        return buffer.getvalue()

    def mount(self) -> Any:
        """``/work`` in a container: the volume, never filled from the image's own /work."""
        from docker.types import Mount

        return Mount(target=WORK, source=self.name, type="volume", read_only=False, no_copy=True)

    def watch(self, live: Iterable[str]) -> None:
        """While the ticket runs: copy its ``live`` files beside the session, read /work's fill."""
        mirror = self.session.tmp / "live"
        mirror.mkdir(exist_ok=True)
        names = list(live)
        self._poll(mirror, names)
        self.session.mount_live(mirror, fill=lambda: self._fill)
        self._thread = threading.Thread(
            target=self._loop, args=(mirror, names), name="work-live", daemon=True
        )
        self._thread.start()

    def _loop(self, mirror: Path, names: list[str]) -> None:
        while not self._stop.wait(LIVE_POLL_S):
            self._poll(mirror, names)

    def _poll(self, mirror: Path, names: list[str]) -> None:
        try:
            self._fill = self._read_fill()
            for name in names:
                self._mirror(mirror, name)
        except Exception:  # the holder went away with the run: nothing more to read
            return

    def _read_fill(self) -> tuple[int, int, bool]:
        command = ["/usr/bin/stat", "-f", "-c", "%b %f %c %d %S", WORK]
        exec_id = self.api.exec_create(self.holder, command, user=self.user)["Id"]
        blocks, free, inodes, free_inodes, size = map(int, self.api.exec_start(exec_id).split())
        return (blocks - free) * size, inodes - free_inodes, free == 0 or free_inodes == 0

    def _mirror(self, mirror: Path, name: str) -> None:
        """One live file, a regular file at most LIVE_CAP_BYTES, into the mirror; else nothing."""
        import docker.errors

        try:
            chunks, _ = self.api.get_archive(self.holder, f"{WORK}/{name}")
        except docker.errors.NotFound:
            return
        with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks, 4 * LIVE_CAP_BYTES)), mode="r|") as tar:
            member = tar.next()
            if member is None or not member.isfile() or (source := tar.extractfile(member)) is None:
                return
            data = source.read(LIVE_CAP_BYTES)
        target = mirror / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)

    def copy_back(self, workspace: Path, limits: Limits) -> None:
        """Replace the workspace's contents with what the ticket left in /work."""
        self._stop.set()
        cap = limits.workspace_bytes + TAR_MEMBER_BYTES * (limits.workspace_files + 1) + 2**20
        try:
            chunks, _ = self.api.get_archive(self.holder, WORK)
            _empty(workspace)
            with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks, cap)), mode="r|") as tar:
                tar.extractall(workspace, filter=_beneath_work)
        except (OSError, tarfile.TarError) as exc:
            raise SandboxError(f"what the sandbox left in /work could not be copied back: {exc}") from exc
