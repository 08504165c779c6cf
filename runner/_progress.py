"""A running ticket's progress for people: the epochs its worker reports, while it trains.

The worker appends one line per finished epoch to ``out/learning_curve.jsonl`` in its workspace.
While the sandbox runs, the host reads that file every few seconds (beneath the sandbox's own
/work where it has one, ``sandbox.live_workspace``; no symlink followed, at most
``CURVE_CAP_BYTES``) and passes one line per new epoch to the run's progress output: epoch, train
loss, the device-seconds spent and left (host-measured). The epoch and loss are the sandbox's own
claims, and the line says so; nothing here is evidence, and only numbers reach the terminal
(sandboxed code controls that file, so no text of it is printed).

With a ``record`` path (the ticket folder's ``progress.json``, outside the workspace) the watcher
also keeps the latest of those numbers there, written whole (temp file, rename), for the
console's run page to show while the ticket trains.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runner._copyout import read_beneath
from sandbox import live_workspace
from segfactory.files import write_atomic

POLL_S = 2.0  # how often the curve is read
CURVE_CAP_BYTES = 256 * 1024  # read at most this much of the curve (an epoch's line is ~1 KiB)
CURVE_PATH = "out/learning_curve.jsonl"  # beneath the workspace
PROGRESS_FILE = "progress.json"  # in the ticket folder: the latest epoch, host-written, for the console
NOT_EVIDENCE = "epoch and loss: the sandbox's own report, not evidence"


def epoch_lines(data: bytes) -> list[tuple[int, float]]:
    """(epoch, train loss) of each complete, well-formed line; anything else is skipped."""
    found = []
    for raw in data.split(b"\n")[:-1]:  # the last piece may be a line still being written
        try:
            line = json.loads(raw)
            epoch, loss = line["epoch"], line["train_loss"]
        except (ValueError, TypeError, KeyError):
            continue
        if (
            isinstance(epoch, int)
            and not isinstance(epoch, bool)
            and isinstance(loss, (int, float))
            and math.isfinite(loss)
            and 0 <= epoch < 100_000
        ):
            found.append((epoch, float(loss)))
    return found


class CurveWatcher:
    """Reports new epochs of one attempt while it runs; use as a context manager."""

    def __init__(
        self,
        work: Path,
        label: str,
        epochs: int,
        spent_before_s: float,
        budget_s: float,
        emit: Callable[[str], None] | None,
        record: Path | None = None,
    ) -> None:
        self.work, self.label, self.epochs = work, label, epochs
        self.spent_before_s, self.budget_s, self.emit, self.record = spent_before_s, budget_s, emit, record
        self._seen = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"progress-{label}", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> CurveWatcher:
        self._write(None, None, self.spent_before_s)  # started: no epoch yet
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
            data, _ = read_beneath(live_workspace(self.work), CURVE_PATH, cap=CURVE_CAP_BYTES)
        except Exception:  # not written yet, or not a plain file: nothing to report
            return
        spent = self.spent_before_s + time.monotonic() - self._started
        for epoch, loss in epoch_lines(data):
            if epoch <= self._seen:
                continue
            self._seen = epoch
            self._write(epoch + 1, loss, spent)
            if self.emit is not None:
                self.emit(
                    f"  {self.label}: epoch {epoch + 1}/{self.epochs}, train loss {loss:.4f}; "
                    f"{spent:.0f} device-s spent, {max(0.0, self.budget_s - spent):.0f} left ({NOT_EVIDENCE})"
                )

    def _write(self, epoch: int | None, loss: float | None, spent: float) -> None:
        """The latest numbers to ``record`` (numbers only: no text of the sandbox's passes)."""
        if self.record is None:
            return
        body = {
            "ticket_id": self.label,
            "epoch": epoch,
            "epochs": self.epochs,
            "train_loss": loss,
            "device_seconds_spent": round(spent, 1),
            "device_seconds_left": round(max(0.0, self.budget_s - spent), 1),
            "updated_at": time.time(),
            "note": NOT_EVIDENCE,
        }
        try:
            write_atomic(self.record, json.dumps(body, sort_keys=True))
        except OSError:  # progress for people only: a full disk must not fail the ticket
            pass
