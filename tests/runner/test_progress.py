"""A running ticket's progress for people: only well-formed epochs, only numbers, once each, and
never through a link the sandbox planted."""

from __future__ import annotations

import json
import os
from pathlib import Path

from runner._progress import CURVE_PATH, CurveWatcher, epoch_lines


def _line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_only_complete_well_formed_epochs_are_read() -> None:
    data = (
        _line(epoch=0, train_loss=0.5)
        + b"not json\n"
        + _line(epoch=True, train_loss=0.4)
        + _line(epoch=1, train_loss=float("nan"))
        + _line(epoch="2", train_loss=0.3)
        + _line(epoch=1, train_loss=0.25)
        + b'{"epoch": 2, "train_loss": 0.2'
    )  # the last one still being written
    assert epoch_lines(data) == [(0, 0.5), (1, 0.25)]


def test_each_epoch_is_reported_once_with_numbers_only(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    curve = tmp_path / CURVE_PATH
    lines: list[str] = []
    watcher = CurveWatcher(tmp_path, "t001", epochs=4, spent_before_s=10.0, budget_s=120.0, emit=lines.append)
    watcher.poll()  # nothing written yet
    curve.write_bytes(_line(epoch=0, train_loss=0.5123, note="\x1b]0;pwned\x07 click here"))
    watcher.poll()
    watcher.poll()
    curve.write_bytes(curve.read_bytes() + _line(epoch=1, train_loss=0.31))
    watcher.poll()
    assert len(lines) == 2 and lines[0].startswith(
        "  t001: epoch 1/4, train loss 0.5123; 10 device-s spent, 110 left"
    )
    assert lines[1].startswith("  t001: epoch 2/4, train loss 0.3100;") and "not evidence" in lines[1]
    assert not any("\x1b" in line or "click" in line for line in lines)


def test_a_curve_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.jsonl"
    secret.write_bytes(_line(epoch=0, train_loss=0.123456))
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    os.symlink(secret, work / CURVE_PATH)
    lines: list[str] = []
    CurveWatcher(work, "t001", 4, 0.0, 120.0, lines.append).poll()
    assert lines == []


def test_the_watcher_reports_while_the_attempt_runs_and_stops_with_it(tmp_path: Path) -> None:
    import time

    import runner._progress as progress

    (tmp_path / "out").mkdir()
    lines: list[str] = []
    progress_poll, progress.POLL_S = progress.POLL_S, 0.05
    try:
        with CurveWatcher(tmp_path, "t001", 2, 0.0, 60.0, lines.append):
            (tmp_path / CURVE_PATH).write_bytes(_line(epoch=0, train_loss=0.4))
            deadline = time.monotonic() + 5
            while not lines and time.monotonic() < deadline:
                time.sleep(0.02)
        (tmp_path / CURVE_PATH).write_bytes(_line(epoch=0, train_loss=0.4) + _line(epoch=1, train_loss=0.3))
        time.sleep(0.2)
    finally:
        progress.POLL_S = progress_poll
    assert len(lines) == 1 and "epoch 1/2" in lines[0]
