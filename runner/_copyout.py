"""Copying files out of a sandbox workspace without trusting anything in it (trust rule 6).

The workspace is written by sandboxed code, which may have planted symlinks (to host files,
the vault, ``/proc``), FIFOs or devices (to hang or confuse the reader), hard links, or a huge
file. Every open here is ``openat``-style: the workspace root is opened once, then each path
component is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so no symlink is
followed anywhere beneath the root, and ``..`` or absolute names are refused before any open.
The final file must be a regular file with one link, and at most ``cap`` bytes are read.

Archives are never extracted here; were one ever needed, ``tarfile`` with ``filter="data"``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from segfactory.errors import DataError, LimitExceeded

MAX_MODEL_BYTES = 256 * 1024**2  # model.onnx; past this: LimitExceeded, the ticket fails
MAX_REPORT_BYTES = 64 * 1024  # result.json (sandbox-reported); past this: kept truncated, flagged
CHUNK_BYTES = 1 << 20  # read size while copying

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not block waiting for a writer; it is refused after fstat.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class UnsafeArtifact(DataError):
    """A file in a sandbox workspace was a symlink, special file, hard link or escaping path."""


@dataclass(frozen=True)
class CopiedFile:
    """A file copied out of a workspace: where it landed on the host, its size and hash."""

    path: Path
    size: int
    sha256: str


def _components(relpath: str) -> tuple[str, ...]:
    """The path's components, refusing absolute paths, ``..``, ``.`` and empty names."""
    pure = PurePosixPath(relpath)
    parts = pure.parts
    if pure.is_absolute() or not parts or any(p in ("", ".", "..") for p in parts):
        raise UnsafeArtifact(f"refused path {relpath!r}: only plain relative names beneath the workspace")
    return parts


def open_beneath(root: Path, relpath: str) -> int:
    """Open ``root/relpath`` for reading, following no symlink beneath ``root``; returns an fd.

    Raises UnsafeArtifact for a symlink at any component, a non-directory parent, a file that
    is not regular (FIFO, device, socket, directory) or has more than one link, and
    FileNotFoundError when it does not exist. The caller closes the fd.
    """
    parts = _components(relpath)
    dir_fd = os.open(root, _DIR_FLAGS)
    for part in parts[:-1]:
        dir_fd = _descend(dir_fd, part, relpath)  # closes its parent, also on error
    try:
        fd = _open_leaf(dir_fd, parts[-1], relpath)
    finally:
        os.close(dir_fd)
    _check_regular(fd, relpath)
    return fd


def _descend(dir_fd: int, name: str, relpath: str) -> int:
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeArtifact(
                f"refused {relpath!r}: component {name!r} is a symlink or not a directory"
            ) from None
        raise
    finally:
        os.close(dir_fd)
    return child


def _open_leaf(dir_fd: int, name: str, relpath: str) -> int:
    try:
        return os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeArtifact(f"refused {relpath!r}: it is a symlink") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise UnsafeArtifact(f"refused {relpath!r}: not a regular file") from None
        raise


def _check_regular(fd: int, relpath: str) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeArtifact(f"refused {relpath!r}: not a regular file (mode {stat.filemode(info.st_mode)})")
    if info.st_nlink != 1:
        os.close(fd)
        raise UnsafeArtifact(f"refused {relpath!r}: it has {info.st_nlink} hard links")


def copy_out(root: Path, relpath: str, dest: Path, *, cap: int = MAX_MODEL_BYTES) -> CopiedFile:
    """Copy ``root/relpath`` to the new file ``dest`` (never overwritten), reading at most ``cap``.

    Raises UnsafeArtifact (see ``open_beneath``), LimitExceeded past ``cap`` bytes (``dest`` is
    then removed), FileNotFoundError when the file is missing, FileExistsError when ``dest`` is.
    """
    fd = open_beneath(root, relpath)
    digest, size = hashlib.sha256(), 0
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "rb") as src, os.fdopen(out, "wb") as sink:
            while block := src.read(CHUNK_BYTES):
                size += len(block)
                if size > cap:
                    raise LimitExceeded(
                        f"{relpath!r} in the workspace exceeds the copy-out cap of {cap} bytes"
                    )
                digest.update(block)
                sink.write(block)
            sink.flush()
            os.fsync(sink.fileno())
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return CopiedFile(path=dest, size=size, sha256=digest.hexdigest())


def read_beneath(root: Path, relpath: str, *, cap: int = MAX_REPORT_BYTES) -> tuple[bytes, bool]:
    """Read at most ``cap`` bytes of ``root/relpath`` safely; returns (data, truncated)."""
    fd = open_beneath(root, relpath)
    with os.fdopen(fd, "rb") as src:
        data = src.read(cap + 1)
    return data[:cap], len(data) > cap
