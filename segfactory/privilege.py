"""What a process running as root does with paths and interpreters that others can influence.

``chown_tree(top, uid, gid)`` gives a tree to a user and never follows a link. Each directory is
opened relative to its parent's descriptor with ``O_DIRECTORY | O_NOFOLLOW`` and changed through
that descriptor (``fchown``), so a directory swapped for a link while the walk runs is skipped,
never entered. Each regular file is opened the same way (``O_NOFOLLOW | O_NONBLOCK``: a FIFO
cannot hang the walk) and changed through its descriptor. Other entries (a FIFO, a socket) are
changed with ``fchownat(..., AT_SYMLINK_NOFOLLOW)`` relative to the directory's descriptor.
Links stay as they are. A regular file with more than one hard link is given away only when it
already belongs to the target: a hard link to a file outside the tree would otherwise hand that
file over.

``isolated_python(tree, module, *args)`` is the argv that runs ``python -m module args`` with
``-I``: neither the current directory, nor ``PYTHONPATH``, nor the user's site directory is on
``sys.path``. ``tree`` alone is put first, so the code comes from that tree (the checkout this
process runs from) and from nowhere that a less trusted user can write. Start it with
``cwd=SAFE_CWD``, so that the directory it starts in is not the caller's either.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import sys
from pathlib import Path

log = logging.getLogger(__name__)

MAX_DEPTH = 256  # directory levels below the top of a chown walk; past this: OwnershipError
SAFE_CWD = "/"  # where a process that root starts begins: a directory only root can write
SOURCE_TREE = Path(__file__).resolve().parent.parent  # the checkout (or pinned copy) this code is from
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class OwnershipError(OSError):
    """A chown walk was refused: its top is a link or not a directory, or the tree is too deep."""


def open_dir(path: Path | str, dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``path``; OwnershipError when it is a link or not a directory.
    Only the last component is checked: the caller vouches for the parents (or passes ``dir_fd``)."""
    try:
        return os.open(path, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise OwnershipError(
                exc.errno, f"{path} is a link or not a directory; refusing to walk it"
            ) from None
        raise


def _entries(dir_fd: int) -> list[str]:
    """The names in the directory (read at once: the walk changes nothing it has not listed)."""
    with os.scandir(dir_fd) as found:
        return [entry.name for entry in found]


def _open_child(dir_fd: int, name: str, flags: int) -> int | None:
    """``name`` opened relative to ``dir_fd`` without following a link; None when it is gone or
    has become a link (swapped while the walk ran)."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            log.warning("not following %s: it became a link during the walk", name)
            return None
        raise


def _already(info: os.stat_result, uid: int, gid: int) -> bool:
    """The entry belongs to ``uid:gid`` already (-1: that id is not changed)."""
    return uid in (-1, info.st_uid) and gid in (-1, info.st_gid)


def _give(fd: int, uid: int, gid: int, mode: int | None) -> None:
    os.fchown(fd, uid, gid)
    if mode is not None:
        os.fchmod(fd, mode)


def chown_entry(dir_fd: int, name: str, uid: int, gid: int, mode: int | None = None) -> None:
    """One entry of the directory ``dir_fd`` that is not a directory, changed without following a
    link (a link itself is left alone; ``mode`` applies to a regular file)."""
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        return  # never followed, never changed
    if not stat.S_ISREG(info.st_mode):
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        return
    fd = _open_child(dir_fd, name, FILE_FLAGS)
    if fd is None:
        return
    try:
        opened = os.fstat(fd)
        if stat.S_ISREG(opened.st_mode) and opened.st_nlink > 1 and not _already(opened, uid, gid):
            log.warning("not giving away %s: it has %d hard links", name, opened.st_nlink)
            return
        _give(fd, uid, gid, mode if stat.S_ISREG(opened.st_mode) else None)
    finally:
        os.close(fd)


def chown_tree(
    top: Path | str,
    uid: int,
    gid: int,
    *,
    dir_mode: int | None = None,
    file_mode: int | None = None,
    shallow: frozenset[str] = frozenset(),
    dir_fd: int | None = None,
) -> None:
    """Give ``top`` and everything below it to ``uid:gid`` (-1: that id unchanged) and the modes,
    when given, without following a link. In directories named in ``shallow`` (paths relative to
    ``top``) the walk changes the entries but enters no subdirectory. OwnershipError when ``top`` is a link or
    the tree is deeper than ``MAX_DEPTH``; an entry that vanishes or turns into a link meanwhile
    is skipped."""
    stack: list[tuple[int, str, list[str]]] = []
    fd = open_dir(top, dir_fd)
    stack.append((fd, "", []))
    try:
        _give(fd, uid, gid, dir_mode)
        stack[0] = (fd, "", _entries(fd))
        while stack:
            parent, rel, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            name = names.pop()
            path = f"{rel}/{name}" if rel else name
            try:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                with contextlib.suppress(FileNotFoundError):  # gone since it was listed
                    chown_entry(parent, name, uid, gid, file_mode)
                continue
            if rel in shallow:
                continue
            child = _open_child(parent, name, DIR_FLAGS)
            if child is None:
                continue
            stack.append((child, path, []))
            if len(stack) > MAX_DEPTH + 1:
                raise OwnershipError(0, f"{Path(top) / path} is more than MAX_DEPTH={MAX_DEPTH} levels deep")
            _give(child, uid, gid, dir_mode)
            stack[-1] = (child, path, _entries(child))
    finally:
        for opened, _, _ in stack:
            os.close(opened)


def isolated_python(tree: Path | str, module: str, *args: str, unbuffered: bool = False) -> list[str]:
    """argv for ``python -m module args`` isolated from the caller's directory and environment,
    importing first from ``tree`` (start it with ``cwd=SAFE_CWD``)."""
    boot = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-I", *(["-u"] if unbuffered else []), "-c", boot, *args]
