"""The gate service over real HTTP: Unix socket and TCP with a token."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gate.client import GateClient, running_gate, wait_ready
from tests.gate import models
from tests.gate.conftest import build_home, vault_hashes

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
PAD = 0.5  # padding quantum for these tests (seconds)
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GateClient, Path, Path]]:
    root = tmp_path_factory.mktemp("svc")
    home, baseline = build_home(root / "home")
    with running_gate(home, ["--pad-quantum", str(PAD)]) as client:
        yield client, home, baseline


def _raw_uds(client: GateClient, request: bytes) -> bytes:
    path = client._http._transport._pool._uds  # type: ignore[attr-defined]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.sendall(request)
        sock.settimeout(10)
        data = b""
        while b"}" not in data.partition(b"\r\n\r\n")[2]:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_status_reports_hashes_and_budgets(served: tuple[GateClient, Path, Path]) -> None:
    client, _, _ = served
    status = client.status()
    assert len(status["win_rule_sha256"]) == 64 and status["win_rule_ok"]
    assert {t["tier"] for t in status["tiers"]} >= {"confirm-a", "confirm-b"}


def test_submit_is_coarse_and_padded(served: tuple[GateClient, Path, Path], tmp_path: Path) -> None:
    client, _, _ = served
    model = models.save(models.threshold_model(bias=-0.45), tmp_path / "m.onnx")
    start = time.monotonic()
    verdict = client.submit(model, None, "svc-1")
    elapsed = time.monotonic() - start
    assert verdict.verdict.value == "WIN"
    assert elapsed >= PAD and (elapsed % PAD) < 0.25  # a multiple of the quantum, plus transport


def test_bad_requests_get_invalid_and_the_service_stays_up(served: tuple[GateClient, Path, Path]) -> None:
    client, home, _ = served
    before = vault_hashes(home / "vault")
    left = {t["tier"]: t["left"] for t in client.status()["tiers"]}["confirm-a"]
    bad_json = client._http.post("/submit", content=b"{not json")
    assert bad_json.json()["verdict"] == "INVALID"
    wrong_types = client._http.post("/submit", json={"ticket_id": 7, "model_b64": "AAAA"})
    assert wrong_types.json()["verdict"] == "INVALID"
    oversized = _raw_uds(client, b"POST /submit HTTP/1.1\r\nhost: gate\r\ncontent-type: application/json\r\n"
                                 b"content-length: 99999999999\r\n\r\n{}")
    assert b'"verdict":"INVALID"' in oversized
    status = client.status()
    assert {t["tier"]: t["left"] for t in status["tiers"]}["confirm-a"] == left - 3  # every submission spends
    assert vault_hashes(home / "vault") == before


def test_anchor_and_audit_event_endpoints(served: tuple[GateClient, Path, Path]) -> None:
    client, _, _ = served
    client.put_anchor(5, "ab" * 32, "run-1")
    client.put_anchor(8, "cd" * 32, None)
    assert client.get_anchor()["seq"] == 8  # type: ignore[index]
    events = client.pull_events(0)
    assert events and all({"id", "ts", "event", "payload"} <= set(e) for e in events)
    assert client.ack_events(events[-1]["id"]) == len(events)
    assert client.pull_events(events[-1]["id"]) == [] or client.pull_events(0)[0]["id"] > events[-1]["id"]
    assert client._http.put("/anchor", json={"seq": "x"}).status_code == 400


def test_socket_is_group_only(served: tuple[GateClient, Path, Path]) -> None:
    client, _, _ = served
    path = client._http._transport._pool._uds  # type: ignore[attr-defined]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_tcp_needs_a_token_and_checks_it(served: tuple[GateClient, Path, Path]) -> None:
    _, home, _ = served
    cmd = [sys.executable, "-m", "segfactory", "gate", "serve", "--home", str(home), "--host", "127.0.0.1"]
    env = {k: v for k, v in os.environ.items() if k != "SEGFACTORY_GATE_TOKEN"}
    refused = subprocess.run(cmd + ["--port", "0"], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert refused.returncode != 0 and "token" in refused.stderr
    port = _free_port()
    proc = subprocess.Popen(cmd + ["--port", str(port), "--pad-quantum", "0"], cwd=REPO, stderr=subprocess.PIPE,
                            env={**env, "SEGFACTORY_GATE_TOKEN": "s3cret-token"})
    try:
        good = GateClient(url=f"http://127.0.0.1:{port}", token="s3cret-token")
        wait_ready(good, proc)
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret-token"}):
            response = httpx.post(f"http://127.0.0.1:{port}/submit", headers=headers, json={"ticket_id": "x"})
            assert response.status_code == 401 and response.json() == {"verdict": "INVALID"}
        assert good.status()["win_rule_ok"]
        assert json.loads(json.dumps(good.pull_events(0)))[-1]["event"] == "gate.auth_refused"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_service_runs_from_the_verified_pinned_copy(served: tuple[GateClient, Path, Path]) -> None:
    client, home, _ = served
    status = client.status()
    pinned = home / "vault" / "gate-pinned" / status["pinned_code_sha256"]
    assert pinned.is_dir() and status["pinned_code_ok"] is True  # loaded modules lie inside the copy


def test_tampered_pinned_copy_refuses_service(tmp_path: Path) -> None:
    from gate.ledger import Ledger
    from gate.pinned import current_pinned

    home, baseline = build_home(tmp_path / "home")
    pinned = current_pinned(home / "vault")
    assert pinned is not None
    with running_gate(home, ["--pad-quantum", "0"]) as client:
        (pinned / "gate" / "win_rule.py").write_text("# tampered\n")
        verdict = client.submit(baseline, None, "after-tamper")
        assert verdict.verdict.value == "INVALID" and client.status()["pinned_code_ok"] is False
    with pytest.raises(Exception, match="exited during start"), running_gate(home):
        pass
    events = [e["event"] for e in Ledger(home / "vault" / "ledger.sqlite").events_after(0)]
    assert events.count("gate.pin_mismatch") >= 2
