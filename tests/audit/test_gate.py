"""The anchor and the event queue through the real gate service: its ledger, HTTP over its socket."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from audit import AuditLog, GateAnchorStore, verify_log
from audit.gate_events import pull
from audit.reader import iter_records
from segfactory.home import Home
from tests.audit.conftest import log_lines, write_lines
from tests.conftest import CliResult

START_S = 20  # the service must answer within this


@pytest.fixture
def gate_service(home: Home) -> Iterator[tuple[object, object]]:
    """(Gate, GateClient): the gate's FastAPI app served by uvicorn on a Unix socket in a thread."""
    import uvicorn

    from gate.client import GateClient
    from gate.core import Gate
    from gate.service import bind_unix_socket, create_app
    from segfactory.errors import GateError

    (home.root / "vault").mkdir(parents=True)
    gate = Gate(home.vault, home_root=home.root)
    sock_path = home.root / "gate-run" / "gate.sock"
    server = uvicorn.Server(uvicorn.Config(create_app(gate), log_level="warning", access_log=False))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [bind_unix_socket(sock_path)]}, daemon=True
    )
    thread.start()
    client = GateClient(socket_path=sock_path)
    deadline = time.monotonic() + START_S
    while True:
        try:
            client.get_anchor()
            break
        except GateError:
            assert time.monotonic() < deadline, "gate service did not start"
            time.sleep(0.05)
    yield gate, client
    client.close()
    server.should_exit = True
    thread.join(timeout=10)


def test_head_is_anchored_in_the_gate_ledger(home: Home, gate_service: tuple[object, object]) -> None:
    _, client = gate_service
    store = GateAnchorStore(client)  # type: ignore[arg-type]
    assert store.get() is None
    with AuditLog(home, store, anchor_every_records=3) as log:
        for i in range(7):
            log.append("runner", "step", {"i": i}, run_id="r1")
        assert store.get() is not None and store.get().seq == 5  # type: ignore[union-attr]
        log.close_run("r1")
    anchor = store.get()
    assert anchor is not None and anchor.seq == 6
    assert verify_log(home.audit, anchor, strict=True).ok
    lines = log_lines(home)
    write_lines(home, lines[:-1])
    assert not verify_log(home.audit, store.get()).ok


def test_gate_events_are_pulled_acked_and_not_repeated(
    home: Home, gate_service: tuple[object, object]
) -> None:
    gate, client = gate_service
    ledger = gate.ledger  # type: ignore[attr-defined]
    ledger.queue_event("gate.verdict", {"ticket_id": "t1", "run_id": "r1", "verdict": "NO_WIN"})
    ledger.queue_event("gate.invalid", {"ticket_id": "t2", "reason": "custom op domain"})
    with AuditLog(home, None) as log:
        assert pull(client, log) == 2  # type: ignore[arg-type]
        assert pull(client, log) == 0  # type: ignore[arg-type]
        ledger.queue_event("gate.verdict", {"ticket_id": "t3"})
        assert pull(client, log) == 1  # type: ignore[arg-type]
    records = list(iter_records(home.audit / "log.jsonl"))
    assert [(r.actor.value, r.event) for r in records] == [
        ("gate", "gate.verdict"),
        ("gate", "gate.invalid"),
        ("gate", "gate.verdict"),
    ]
    assert records[0].run_id == "r1" and records[1].payload["reason"] == "custom op domain"
    assert [r.payload["ticket_id"] for r in records] == ["t1", "t2", "t3"]
    assert all(isinstance(r.payload["gate_event_id"], int) for r in records)
    assert ledger.events_after(0) == []  # acknowledged events are dropped from the gate's queue


def test_cli_verify_asks_the_served_gate(
    home: Home, gate_service: tuple[object, object], cli: Callable[..., CliResult]
) -> None:
    _, client = gate_service
    with AuditLog(home, GateAnchorStore(client)) as log:  # type: ignore[arg-type]
        log.append("human", "approve", {"id": "d1"})
        log.close_run("r1")
    result = cli("audit", "verify", "--json", "--home", str(home.root), timeout=60)
    assert result.returncode == 0, result.stderr
    assert '"anchor_checked": true' in result.stdout and '"unanchored_from": null' in result.stdout


def test_missing_gate_is_a_clear_error(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    result = cli("audit", "verify", "--home", str(tmp_path / "nohome"), timeout=60)
    assert result.returncode != 0
    assert result.stderr.startswith("segfactory: error: no segfactory home")


class _CrashOnAck:
    """The real client, except that the first ack dies (the puller crashed before acknowledging)."""

    def __init__(self, client: object) -> None:
        self.client = client

    def pull_events(self, after: int) -> object:
        return self.client.pull_events(after)  # type: ignore[attr-defined]

    def ack_events(self, up_to: int) -> int:
        raise ConnectionError("killed before the ack")


def test_a_crash_before_the_ack_does_not_duplicate_events(
    home: Home, gate_service: tuple[object, object]
) -> None:
    gate, client = gate_service
    gate.ledger.queue_event("gate.verdict", {"ticket_id": "t1"})  # type: ignore[attr-defined]
    with AuditLog(home, None) as log:
        with pytest.raises(ConnectionError):
            pull(_CrashOnAck(client), log)
        assert pull(client, log) == 0  # type: ignore[arg-type]
    assert [r.payload["ticket_id"] for r in iter_records(home.audit / "log.jsonl")] == ["t1"]
    assert gate.ledger.events_after(0) == []  # type: ignore[attr-defined]


def test_a_cut_and_regrown_log_is_caught_by_the_gates_anchors(
    home: Home, gate_service: tuple[object, object], cli: Callable[..., CliResult]
) -> None:
    """Cut the log, re-anchor it lower (refused), grow it past the old head and anchor that
    (accepted: it is ahead): `audit verify` still fails, on the old anchor the new log lacks."""
    import httpx

    from segfactory.errors import GateError

    _, client = gate_service
    store = GateAnchorStore(client)  # type: ignore[arg-type]
    with AuditLog(home, store) as log:
        for i in range(10):
            log.append("runner", "step", {"i": i}, run_id="r1")
        log.close_run("r1")
    assert store.get().seq == 9  # type: ignore[union-attr]
    write_lines(home, log_lines(home)[:5])
    with AuditLog(home, store) as log:
        log.append("runner", "step", {"i": "rewritten"}, run_id="r1")
        with pytest.raises(GateError, match="409"):
            log.flush_anchor("r1")
        for i in range(8):
            log.append("runner", "step", {"i": f"regrown {i}"}, run_id="r1")
        log.anchor = None  # the rest is anchored by hand below
    sock = str(home.root / "gate-run" / "gate.sock")
    with httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://gate") as raw:
        assert raw.put("/anchor", json={"seq": 3, "hash": "0" * 64, "run_id": None}).status_code == 409
    head = [r for r in iter_records(home.audit / "log.jsonl")][-1]
    assert head.seq > 9
    client.put_anchor(head.seq, head.hash, "r1")  # type: ignore[attr-defined]
    assert store.get().seq == head.seq  # type: ignore[union-attr]
    result = cli("audit", "verify", "--json", "--home", str(home.root), timeout=60)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and not report["ok"], report
    assert any("seq 9" in p and "rewritten" in p for p in report["problems"]), report["problems"]
    failed = [r for r in iter_records(home.audit / "log.jsonl") if r.event == "anchor_failed"]
    assert failed and "409" in failed[0].payload["error"]


def _raw(home: Home) -> object:
    import httpx

    sock = str(home.root / "gate-run" / "gate.sock")
    return httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://gate")


def test_an_ack_cannot_drop_events_nobody_pulled(home: Home, gate_service: tuple[object, object]) -> None:
    gate, client = gate_service
    for i in range(3):
        gate.ledger.queue_event("gate.verdict", {"ticket_id": f"t{i}"})  # type: ignore[attr-defined]
    with _raw(home) as raw:  # type: ignore[attr-defined]
        refused = raw.post("/audit/ack", json={"up_to": 2**62})
    assert refused.status_code == 409 and "delivered" in refused.json()["error"]
    with AuditLog(home, None) as log:
        assert pull(client, log) == 3  # type: ignore[arg-type]
    assert [r.payload["ticket_id"] for r in iter_records(home.audit / "log.jsonl")] == ["t0", "t1", "t2"]


def test_event_ids_are_not_reused_after_a_full_ack(home: Home, gate_service: tuple[object, object]) -> None:
    gate, client = gate_service
    ledger = gate.ledger  # type: ignore[attr-defined]
    with AuditLog(home, None) as log:
        for round_ in range(3):
            ledger.queue_event("gate.verdict", {"ticket_id": f"t{round_}"})
            assert pull(client, log) == 1, f"round {round_}: the event was skipped"  # type: ignore[arg-type]
            assert ledger.events_after(0) == []  # acknowledged: the queue is empty again
    ids = [r.payload["gate_event_id"] for r in iter_records(home.audit / "log.jsonl")]
    assert ids == sorted(set(ids)) and len(ids) == 3


PULLER = """
    import sys, time
    from pathlib import Path
    from audit import AuditLog
    from audit.gate_events import pull
    from gate.client import GateClient
    from segfactory.home import Home
    root = Path(sys.argv[1])
    client = GateClient(socket_path=root / "gate-run" / "gate.sock")
    with AuditLog(Home(root), None) as log:
        while not (root / "stop").exists():
            pull(client, log)
        pull(client, log)
"""


def test_two_pulling_processes_append_each_event_once(
    home: Home, gate_service: tuple[object, object]
) -> None:
    import subprocess
    import sys
    import textwrap

    from tests.conftest import REPO

    gate, _ = gate_service
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PULLER), str(home.root)], cwd=REPO, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    try:
        for i in range(60):
            gate.ledger.queue_event("gate.verdict", {"ticket_id": f"t{i}"})  # type: ignore[attr-defined]
            time.sleep(0.02)
        time.sleep(1.0)
    finally:
        (home.root / "stop").touch()
        errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    tickets = [
        r.payload["ticket_id"] for r in iter_records(home.audit / "log.jsonl") if r.actor.value == "gate"
    ]
    assert sorted(tickets, key=lambda t: int(t[1:])) == [f"t{i}" for i in range(60)]
