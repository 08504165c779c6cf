"""Writing a folder so that nobody ever sees it half-written.

``staged_dir(target)`` hands out a fresh hidden sibling of ``target`` to fill; when the block
ends without an error it is renamed onto ``target`` in one step (an empty ``target`` is
replaced), and on any error, a kill included as far as Python sees it, it is removed. A crash
the process does not survive leaves only a hidden ``.<name>.tmp-*`` folder beside ``target``,
which no reader looks at, and the next attempt starts a new one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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


__all__ = ["staged_dir"]
