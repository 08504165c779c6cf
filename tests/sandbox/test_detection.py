"""The host-side decoy watch on its own: real inotify, a real queue overflow, the event cap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import SandboxEvent
from sandbox._inotify import MAX_EVENTS, DecoyWatcher

MAX_QUEUED = Path("/proc/sys/fs/inotify/max_queued_events")


def _open_alternately(paths: list[Path], times: int) -> None:
    """Open the files in turn: the kernel merges an event only into an identical last one."""
    for i in range(times):
        os.close(os.open(paths[i % len(paths)], os.O_RDONLY))


def _decoys(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("labels.npy", "images.npy"):
        (tmp_path / name).write_bytes(b"\x93NUMPY")
        files[str(tmp_path / name)] = f"/data/holdout/{name}"
    return files


def test_every_open_is_an_event_up_to_the_cap(tmp_path: Path) -> None:
    files = _decoys(tmp_path)
    events: list[SandboxEvent] = []
    watcher = DecoyWatcher(files, events.append)
    _open_alternately([Path(p) for p in files], MAX_EVENTS + 5)
    watcher.stop()
    hits = [e for e in events if e.kind == "protected_read_attempt"]
    gaps = [e for e in events if e.kind == "monitoring_gap"]
    assert len(hits) == MAX_EVENTS and {e.path for e in hits} == set(files.values())
    assert [g.detail["seen"] for g in gaps] == [MAX_EVENTS + 5]


def test_queue_overflow_is_recorded_as_a_monitoring_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = int(MAX_QUEUED.read_text())
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: overflowing it would take too long")
    files = _decoys(tmp_path)
    events: list[SandboxEvent] = []
    watcher = DecoyWatcher(files, events.append)
    drain = watcher._drain
    monkeypatch.setattr(watcher, "_drain", lambda: None)  # the reader stalls, as under heavy load
    _open_alternately([Path(p) for p in files], limit + 100)
    monkeypatch.setattr(watcher, "_drain", drain)
    watcher.stop()
    assert any(e.kind == "monitoring_gap" and e.detail["reason"] == "inotify queue overflow" for e in events)
