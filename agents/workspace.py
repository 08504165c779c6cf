"""A ticket workspace as the code-editing agent sees it: beneath its root, no symlinks followed.

Every path is walked one component at a time from a directory descriptor of the root with
``O_NOFOLLOW`` (openat-style), so a symlink anywhere on the way (planted by the agent's own
``run`` command, say) is refused rather than followed, and nothing above the root is reachable.
Absolute paths, ``..``, NUL bytes and protected locations are refused before any open.
Refusals raise :class:`PathRefused`, whose ``kind`` is the audit event to record.

Only regular files are read or written. A FIFO, a device or a socket (which the agent's own
``run`` command can make) is refused with :class:`NotRegular`, and every open is non-blocking,
so neither a FIFO without a writer nor a device can hold the host. Listings and walks are
bounded (:data:`MAX_SCAN_ENTRIES`, :data:`MAX_WALK_DEPTH`, :data:`MAX_WALK_ENTRIES`): a walk past
them raises :class:`TreeRefused`, with no recursion to exhaust.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from agents._paths import protected_pattern

MAX_READ_BYTES = 256 * 1024  # past this: the read returns the first bytes and says truncated + size
MAX_WRITE_BYTES = 1024**2  # past this: the write is refused with a corrective message
MAX_LIST_ENTRIES = 500  # past this: the listing is cut and says truncated + count
MAX_SCAN_ENTRIES = 20_000  # entries one listing reads from a folder; past this it stops, truncated
MAX_WALK_DEPTH = 32  # folder levels a walk descends; past this: TreeRefused
MAX_WALK_ENTRIES = 20_000  # entries one walk visits in all; past this: TreeRefused
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO never waits for its other end; O_NOCTTY: a tty never becomes ours.
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class PathRefused(Exception):
    """A path the agent may not use. ``kind``: path_escape_attempt or protected_read_attempt."""

    def __init__(self, kind: str, path: str, why: str) -> None:
        super().__init__(
            f"refused {path!r}: {why}. Use a relative path inside the workspace, "
            "without '..' or symlinks; protected locations are off limits."
        )
        self.kind = kind
        self.path = path


class NotRegular(OSError):
    """A path that is a FIFO, device, socket or folder where a regular file was expected."""

    def __init__(self, path: str, mode: int | None) -> None:
        kind = _kind_of(mode) if mode is not None else "special file"
        super().__init__(
            f"{path!r} is a {kind}, not a regular file; only regular files can be read or written "
            "(remove it, or use another name)"
        )


class TreeRefused(Exception):
    """A tree that cannot be read back whole: too deep, too many entries, a link or special file
    (then ``path`` and ``kind`` name it)."""

    def __init__(self, message: str, path: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.path, self.kind = path, kind


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
        """A descriptor of the regular file ``path``, opened without blocking or following a link;
        NotRegular for anything else (checked before the open, and again on the open file)."""
        parts = self._parts(path)
        if not parts:
            raise IsADirectoryError(f"{path!r} is the workspace root, not a file")
        with self._dir(parts[:-1], path, create=create_dirs) as dfd:
            try:
                mode: int | None = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None  # a new file (for a write), or the open below says it is missing
            if mode is not None and stat.S_ISLNK(mode):
                raise PathRefused("path_escape_attempt", path, "it is a symlink; symlinks are not followed")
            if mode is not None and not stat.S_ISREG(mode):
                raise NotRegular(path, mode)
            try:
                fd = os.open(parts[-1], flags | _FILE_FLAGS, 0o644, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a FIFO swapped in, opened for writing with no reader
                    raise NotRegular(path, None) from exc
                raise self._refusal(exc, path, dfd, parts[-1]) from exc
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped in between the check and the open
            os.close(fd)
            raise NotRegular(path, info.st_mode)
        return fd

    def list(self, path: str = ".", *, limit: int = MAX_LIST_ENTRIES) -> tuple[list[dict[str, object]], bool]:
        """(entries, truncated): name, type (file, dir, symlink, other) and size of each entry,
        sorted by name, at most ``limit``; a folder is read for at most MAX_SCAN_ENTRIES entries."""
        with self._dir(self._parts(path), path) as fd, os.scandir(fd) as it:
            scanned = list(itertools.islice(it, MAX_SCAN_ENTRIES + 1))
            entries = [_entry(e) for e in sorted(scanned[:MAX_SCAN_ENTRIES], key=lambda e: e.name)]
        return entries[:limit], len(scanned) > MAX_SCAN_ENTRIES or len(entries) > limit

    def read(self, path: str) -> tuple[str, bool, int]:
        """(text, truncated, size in bytes); only regular files are read."""
        data, truncated, size = self.read_bytes(path, MAX_READ_BYTES)
        return data.decode(errors="replace"), truncated, size

    def read_bytes(self, path: str, limit: int) -> tuple[bytes, bool, int]:
        """(the first ``limit`` bytes, truncated, size in bytes) of the regular file ``path``."""
        fd = self._open(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(limit + 1)
        return data[:limit], len(data) > limit, size

    def write(self, path: str, content: str) -> int:
        """Write ``content`` to ``path`` under the writable folder; returns bytes written."""
        parts = self._parts(path)
        if len(parts) < 2 or parts[0] != self.writable:
            raise PermissionError(f"{path!r}: only files under {self.writable}/ may be written")
        data = content.encode()
        if len(data) > MAX_WRITE_BYTES:
            raise ValueError(f"{path!r}: {len(data)} bytes is over MAX_WRITE_BYTES={MAX_WRITE_BYTES}")
        fd = self._open(path, os.O_WRONLY | os.O_CREAT, create_dirs=True)
        with os.fdopen(fd, "wb") as fh:
            os.ftruncate(fh.fileno(), 0)  # only now: the file is known to be a regular one
            fh.write(data)
        return len(data)


def walk_files(
    workspace: Workspace, folder: str, *, skip: tuple[str, ...] = (), skip_suffixes: tuple[str, ...] = ()
) -> list[str]:
    """Every regular file beneath ``folder`` (paths from the root, sorted), walked without
    recursion or following links; names in ``skip`` or ending in ``skip_suffixes`` are left out.

    Raises TreeRefused for a symlink or special file, more than MAX_WALK_DEPTH levels, or more
    than MAX_WALK_ENTRIES entries in all.
    """
    files: list[str] = []
    pending, seen = [(folder, 0)], 0
    while pending:
        current, depth = pending.pop()
        if depth > MAX_WALK_DEPTH:
            raise TreeRefused(
                f"{current} lies more than MAX_WALK_DEPTH={MAX_WALK_DEPTH} folders below {folder}"
            )
        entries, truncated = workspace.list(current, limit=MAX_WALK_ENTRIES)
        seen += len(entries)
        if truncated or seen > MAX_WALK_ENTRIES:
            raise TreeRefused(f"{folder} holds more than MAX_WALK_ENTRIES={MAX_WALK_ENTRIES} entries")
        for entry in entries:
            name, kind = f"{current}/{entry['name']}", entry["type"]
            if str(entry["name"]) in skip or str(entry["name"]).endswith(skip_suffixes):
                continue
            if kind == "dir":
                pending.append((name, depth + 1))
            elif kind == "file":
                files.append(name)
            else:
                what = "symlink" if kind == "symlink" else "special file (a FIFO, device or socket)"
                raise TreeRefused(
                    f"{name} is a {what}; only regular files and folders can be read back", name, what
                )
    return sorted(files)


def _kind_of(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "folder")):
        if test(mode):
            return kind
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


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
