"""A ticket workspace as the code-editing agent sees it: beneath its root, no symlinks followed.

Every path is walked one component at a time from a directory descriptor of the root with
``O_NOFOLLOW`` (openat-style), so a symlink anywhere on the way (planted by the agent's own
``run`` command, say) is refused rather than followed, and nothing above the root is reachable.
Absolute paths, ``..``, NUL bytes and protected locations are refused before any open.
Refusals raise :class:`PathRefused`, whose ``kind`` is the audit event to record.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from agents._paths import protected_pattern

MAX_READ_BYTES = 256 * 1024  # past this: the read returns the first bytes and says truncated + size
MAX_WRITE_BYTES = 1024**2  # past this: the write is refused with a corrective message
MAX_LIST_ENTRIES = 500  # past this: the listing is cut and says truncated + count
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathRefused(Exception):
    """A path the agent may not use. ``kind``: path_escape_attempt or protected_read_attempt."""

    def __init__(self, kind: str, path: str, why: str) -> None:
        super().__init__(
            f"refused {path!r}: {why}. Use a relative path inside the workspace, "
            "without '..' or symlinks; protected locations are off limits."
        )
        self.kind = kind
        self.path = path


class Workspace:
    """The workspace rooted at ``root``; writes only beneath ``root/<writable>``."""

    def __init__(self, root: Path, *, writable: str = "code", home: Path | None = None) -> None:
        self.root = Path(root)
        self.writable = writable
        self.home = home

    def _parts(self, path: str) -> tuple[str, ...]:
        if protected_pattern(path, self.home) is not None:
            raise PathRefused("protected_read_attempt", path, "this location is protected")
        pure = PurePosixPath(path)
        if "\x00" in path or pure.is_absolute() or ".." in pure.parts:
            raise PathRefused("path_escape_attempt", path, "the path leaves the workspace")
        return tuple(p for p in pure.parts if p != ".")

    @contextmanager
    def _dir(self, parts: tuple[str, ...], path: str, *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts`` beneath the root, walked without following links."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                nfd = self._step(fd, part, path)
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    def _step(self, fd: int, part: str, path: str) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise self._refusal(exc, path, fd, part) from exc

    @staticmethod
    def _refusal(exc: OSError, path: str, dir_fd: int, part: str) -> Exception:
        """ELOOP/ENOTDIR from an ``O_NOFOLLOW`` open: a symlink (refused) or a plain file."""
        if exc.errno in {errno.ELOOP, errno.EMLINK, errno.ENOTDIR}:
            try:
                is_link = stat.S_ISLNK(os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                is_link = False
            if is_link or exc.errno != errno.ENOTDIR:
                return PathRefused(
                    "path_escape_attempt", path, "a symlink is on the path; symlinks are not followed"
                )
            return NotADirectoryError(f"{path!r}: a component is not a directory")
        return exc

    def _open(self, path: str, flags: int, *, create_dirs: bool = False) -> int:
        parts = self._parts(path)
        if not parts:
            raise IsADirectoryError(f"{path!r} is the workspace root, not a file")
        with self._dir(parts[:-1], path, create=create_dirs) as dfd:
            try:
                return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            except OSError as exc:
                raise self._refusal(exc, path, dfd, parts[-1]) from exc

    def list(self, path: str = ".") -> tuple[list[dict[str, object]], bool]:
        """(entries, truncated): name, type (file, dir, symlink, other) and size of each entry."""
        with self._dir(self._parts(path), path) as fd, os.scandir(fd) as it:
            entries = [_entry(e) for e in sorted(it, key=lambda e: e.name)]
        return entries[:MAX_LIST_ENTRIES], len(entries) > MAX_LIST_ENTRIES

    def read(self, path: str) -> tuple[str, bool, int]:
        """(text, truncated, size in bytes); only regular files are read."""
        fd = self._open(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise IsADirectoryError(f"{path!r} is not a regular file")
            data = fh.read(MAX_READ_BYTES + 1)
        return data[:MAX_READ_BYTES].decode(errors="replace"), len(data) > MAX_READ_BYTES, info.st_size

    def write(self, path: str, content: str) -> int:
        """Write ``content`` to ``path`` under the writable folder; returns bytes written."""
        parts = self._parts(path)
        if len(parts) < 2 or parts[0] != self.writable:
            raise PermissionError(f"{path!r}: only files under {self.writable}/ may be written")
        data = content.encode()
        if len(data) > MAX_WRITE_BYTES:
            raise ValueError(f"{path!r}: {len(data)} bytes is over MAX_WRITE_BYTES={MAX_WRITE_BYTES}")
        fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return len(data)


def _entry(entry: os.DirEntry[str]) -> dict[str, object]:
    if entry.is_symlink():
        kind = "symlink"
    elif entry.is_dir(follow_symlinks=False):
        kind = "dir"
    elif entry.is_file(follow_symlinks=False):
        kind = "file"
    else:
        kind = "other"
    size = entry.stat(follow_symlinks=False).st_size if kind == "file" else 0
    return {"name": entry.name, "type": kind, "size": size}
