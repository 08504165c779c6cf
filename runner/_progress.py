"""A running ticket's progress for people: the epochs its worker reports, while it trains.

The worker appends one line per finished epoch to ``out/learning_curve.jsonl`` in its
workspace. While the sandbox runs, the host reads that file every few seconds (beneath the
workspace, no symlink followed, at most ``CURVE_CAP_BYTES``) and passes one line per new epoch to
the run's progress output: epoch, train loss, the device-seconds spent and left (host-measured).
The epoch and loss are the sandbox's own claims, and the line says so; nothing here is evidence,
and only numbers reach the terminal (sandboxed code controls that file, so no text of it is
printed).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runner._copyout import read_beneath

POLL_S = 2.0  # how often the curve is read
CURVE_CAP_BYTES = 256 * 1024  # read at most this much of the curve (an epoch's line is ~1 KiB)
CURVE_PATH = "out/learning_curve.jsonl"  # beneath the workspace


def epoch_lines(data: bytes) -> list[tuple[int, float]]:
    """(epoch, train loss) of each complete, well-formed line; anything else is skipped."""
    found = []
    for raw in data.split(b"\n")[:-1]:  # the last piece may be a line still being written
        try:
            line = json.loads(raw)
            epoch, loss = line["epoch"], line["train_loss"]
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(epoch, int) and not isinstance(epoch, bool) and isinstance(loss, (int, float)) \
                and math.isfinite(loss) and 0 <= epoch < 100_000:
            found.append((epoch, float(loss)))
    return found


class CurveWatcher:
    """Reports new epochs of one attempt while it runs; use as a context manager."""

    def __init__(self, work: Path, label: str, epochs: int, spent_before_s: float, budget_s: float,
                 emit: Callable[[str], None]) -> None:
        self.work, self.label, self.epochs = work, label, epochs
        self.spent_before_s, self.budget_s, self.emit = spent_before_s, budget_s, emit
        self._seen = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"progress-{label}", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> CurveWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=POLL_S + 1)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        try:
            data, _ = read_beneath(self.work, CURVE_PATH, cap=CURVE_CAP_BYTES)
        except Exception:  # not written yet, or not a plain file: nothing to report
            return
        spent = self.spent_before_s + time.monotonic() - self._started
        for epoch, loss in epoch_lines(data):
            if epoch <= self._seen:
                continue
            self._seen = epoch
            self.emit(f"  {self.label}: epoch {epoch + 1}/{self.epochs}, train loss {loss:.4f}; "
                      f"{spent:.0f} device-s spent, {max(0.0, self.budget_s - spent):.0f} left "
                      "(epoch and loss: the sandbox's own report, not evidence)")
