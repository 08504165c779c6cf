"""The host's end of the audit hook on its own: a real datagram socket, real senders, every cap.

What arrives is untrusted sandbox output; these tests send what a hostile sandbox would (cut,
malformed, oversized fields, floods, another user's datagrams) straight to the listener.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from sandbox import SandboxEvent
from sandbox._hook import FIELD_MAX_CHARS, MAX_DATAGRAMS, MAX_EVENTS, RECORD_MAX_BYTES, HookListener


def _listen(tmp_path: Path) -> tuple[HookListener, list[SandboxEvent]]:
    events: list[SandboxEvent] = []
    return HookListener(tmp_path / "hook.sock", {os.geteuid()}, events.append), events


def _send(path: Path, *datagrams: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        for data in datagrams:
            sock.sendto(data, str(path))


def _record(kind: str = "file_open", **fields: object) -> bytes:
    return json.dumps({"k": kind, "ts": 1.0, "pid": 7, "op": "open", **fields}).encode()


def test_a_record_becomes_a_sandbox_reported_event_with_host_time(tmp_path: Path) -> None:
    listener, events = _listen(tmp_path)
    _send(listener.path, _record(path="/vault/seeds.json", mode="r", planted=["ignored"]))
    listener.stop()
    [event] = events
    assert (event.kind, event.path, event.sandbox_reported) == ("file_open", "/vault/seeds.json", True)
    assert event.detail == {"op": "open", "mode": "r", "pid": 7, "sandbox_ts": 1.0}  # unknown keys dropped
    assert event.ts > 1.0 and not listener.path.exists()


def test_a_long_field_is_cut_and_says_so(tmp_path: Path) -> None:
    listener, events = _listen(tmp_path)
    path = "/vault/" + "x" * (FIELD_MAX_CHARS + 100)
    _send(listener.path, _record(path=path))
    listener.stop()
    [event] = events
    assert event.path == path[:FIELD_MAX_CHARS]
    assert event.detail["truncated"] is True and event.detail["path_chars"] == len(path)


@pytest.mark.parametrize(
    ("data", "truncated"),
    [
        (b"not json", False),
        (b'["a list"]', False),
        (json.dumps({"k": "made_up"}).encode(), False),
        (b"{" + b" " * (RECORD_MAX_BYTES + 10) + b"}", True),
    ],
)
def test_a_cut_or_malformed_datagram_is_itself_an_event(tmp_path: Path, data: bytes, truncated: bool) -> None:
    listener, events = _listen(tmp_path)
    _send(listener.path, data)
    listener.stop()
    [event] = events
    assert event.kind == "hook_malformed" and event.detail["truncated"] is truncated
    assert len(event.detail["raw"]) <= 512


def test_past_the_event_cap_records_are_counted_in_a_gap(tmp_path: Path) -> None:
    listener, events = _listen(tmp_path)
    sent = MAX_EVENTS + 50
    for start in range(0, sent, 100):  # a burst at a time, so the queue never fills
        _send(listener.path, *(_record(path=f"/vault/{i}") for i in range(start, min(sent, start + 100))))
    listener.stop()
    opens = [e for e in events if e.kind == "file_open"]
    gaps = [e.detail for e in events if e.kind == "monitoring_gap"]
    assert len(opens) == MAX_EVENTS
    assert gaps == [{"reason": "audit hook event cap", "kept": MAX_EVENTS, "seen": sent}]


def test_a_flood_closes_the_socket_and_is_a_gap(tmp_path: Path) -> None:
    listener, events = _listen(tmp_path)
    failed = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        for _ in range(MAX_DATAGRAMS + 1000):
            try:
                sock.sendto(b"x", str(listener.path))
            except OSError:  # closed by the host: the flood cannot go on
                failed += 1
                break
    listener.stop()
    assert failed == 1
    [gap] = [e.detail for e in events if e.kind == "monitoring_gap"]
    assert gap["reason"] == "audit hook flood" and gap["datagrams"] == MAX_DATAGRAMS + 1


def test_a_hook_cap_record_is_a_gap(tmp_path: Path) -> None:
    listener, events = _listen(tmp_path)
    _send(listener.path, json.dumps({"k": "hook_cap", "count": 500, "pid": 9}).encode())
    listener.stop()
    [event] = events
    assert event.kind == "monitoring_gap" and event.detail["count"] == 500
    assert "stopped reporting" in event.detail["reason"]


SYSTEM_PYTHON = "/usr/bin/python3"  # one another user may run (ours lies under root's home)


@pytest.mark.skipif(os.geteuid() != 0, reason="sending as another user needs root")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON}")
def test_datagrams_from_another_user_are_dropped_and_counted() -> None:
    with tempfile.TemporaryDirectory(prefix="hook-") as where:  # under /tmp: another user reaches it
        os.chmod(where, 0o755)
        _forged_and_ours(Path(where))


def _forged_and_ours(where: Path) -> None:
    listener, events = _listen(where)
    sender = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
        "s.sendto(sys.argv[2].encode(), sys.argv[1])"
    )
    forged = _record(path="/vault/forged").decode()
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", sender, str(listener.path), forged], user=65534, timeout=30
    )
    assert proc.returncode == 0
    _send(listener.path, _record(path="/vault/ours"))
    listener.stop()
    assert [e.path for e in events if e.kind == "file_open"] == ["/vault/ours"]
    assert [e.detail for e in events if e.kind == "monitoring_gap"] == [
        {"reason": "audit hook datagrams from another user, dropped", "count": 1}
    ]
