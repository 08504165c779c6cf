"""Writing a file or a folder so that nobody ever sees it half-written.

``write_atomic(path, data)`` writes a hidden sibling of ``path`` (a fresh name: concurrent writers
never share one), flushes it to disk and renames it over ``path``: a reader sees the old file or
the new one, and a crash leaves at most a hidden ``.<name>.*.tmp`` file that no reader looks at.

``staged_dir(target)`` hands out a fresh hidden sibling of ``target`` to fill; when the block
ends without an error it is renamed onto ``target`` in one step (an empty ``target`` is
replaced), and on any error, a kill included as far as Python sees it, it is removed. A crash
the process does not survive leaves only a hidden ``.<name>.tmp-*`` folder beside ``target``,
which no reader looks at, and the next attempt starts a new one.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def staged_dir(target: Path, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary sibling folder of ``target``, renamed onto it at the end; ``mode`` is set
    before the rename (``mkdtemp`` makes 0700, readable by the owner only)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, mode)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` in one step. The file gets ``mode``, else what ``open`` gives
    (0666 less the umask); the temporary name is created exclusively, never through a link."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(tmp, flags, 0o666), "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_jsonl(path: Path, row: Mapping[str, object]) -> None:
    """Append one JSON line, flushed to disk before returning (a kill -9 keeps whole lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every whole JSON line of ``path`` (a torn last line from a crash is skipped)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


__all__ = ["append_jsonl", "read_jsonl", "staged_dir", "write_atomic"]


REMOVE_TIMEOUT_S = 600  # one tree; past it, what is left stays and is reported


def remove_tree(path: Path) -> list[str]:
    """Remove ``path`` and everything beneath it, following no link; returns what could not be
    removed (empty when all went). ``rm -rf`` walks any depth without recursion: a tree a sandbox
    nested thousands of levels deep, which ``shutil.rmtree`` answers with ``RecursionError``
    (not an ``OSError``, so it would end the caller), goes like any other."""
    import subprocess  # deferred: only removals need it

    if not os.path.lexists(path):
        return []
    try:
        done = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            capture_output=True,
            text=True,
            timeout=REMOVE_TIMEOUT_S,
            cwd="/",
        )
    except subprocess.TimeoutExpired:
        return [f"{path}: not removed within {REMOVE_TIMEOUT_S} s"]
    return [line for line in done.stderr.splitlines() if line.strip()] if done.returncode else []
