"""A rich progress bar that is a no-op when progress is off (tests, sandboxes, --json)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def progress_bar(enabled: bool, total: int, completed: int = 0) -> Iterator[Callable[[], None]]:
    """Yield a ``tick()`` that advances one training step; the bar goes to stderr."""
    if not enabled:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(file=sys.stderr)) as bar:
        task = bar.add_task("train", total=total, completed=completed)
        yield lambda: bar.advance(task)
