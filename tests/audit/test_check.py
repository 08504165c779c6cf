"""``audit check``: protected-path reads by real tickets and tools, in records and in their blobs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from audit import INLINE_MAX_BYTES, AuditLog, Finding, check_records, iter_records, load_policy
from audit.check import DEFAULT_POLICY, match_protected
from segfactory.errors import PolicyError
from segfactory.home import Home
from tests.audit.conftest import DECOY_READ, HOSTILE_TICKET

needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def _findings(home: Home) -> list[Finding]:
    return check_records(iter_records(home.audit / "log.jsonl"), load_policy(), home.root)


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_a_tickets_decoy_and_proc_reads_are_findings(ticket_home: Home, _: None) -> None:
    """The worker of a real ticket, run by the runner in bwrap, read a vault decoy and
    /proc/1/environ: both are findings, as records of the sandbox, tied to the ticket."""
    findings = _findings(ticket_home)
    seen = {(f.actor, f.kind, f.path) for f in findings}
    assert ("sandbox", "event", DECOY_READ) in seen, findings
    assert ("sandbox", "argument", "/proc/1/environ") in seen, findings
    records = {r.seq: r for r in iter_records(ticket_home.audit / "log.jsonl")}
    assert all(records[f.seq].payload["ticket_id"] == HOSTILE_TICKET for f in findings)


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_a_tool_call_padded_into_a_blob_hides_nothing(home: Home, _: None) -> None:
    """A code agent's `run` whose argument is padded past the inline size (so the log keeps it as
    a blob) is still found: the check opens the blob."""
    from agents.code_agent import CodeTools, sandbox_runner
    from agents.workspace import Workspace

    work = home.root / "ws"
    work.mkdir(parents=True)
    padded = "cat /proc/1/environ; true" + "\n" * (2 * INLINE_MAX_BYTES)
    with AuditLog(home, None) as log:
        tools = CodeTools(Workspace(work), sandbox_runner("bwrap"), log, run_id="r1", ticket_id="t1")
        tools.call("run", json.dumps({"command": ["sh", "-c", padded], "timeout_s": 30}))
    records = list(iter_records(home.audit / "log.jsonl"))
    assert any(str(v).startswith("blob:") for r in records for v in r.payload.values())  # it did move
    flagged = {(f.event, f.path) for f in _findings(home)}
    assert ("tool_call", "/proc/1/environ") in flagged, flagged


def test_an_unreadable_blob_is_a_finding_and_llm_traffic_stays_closed(home: Home) -> None:
    with AuditLog(home, None) as log:
        big = log.append(
            "proposer", "ticket_proposed", {"ticket": {"code": "x" * INLINE_MAX_BYTES + " /vault/seeds.json"}}
        )
        ref = log.put_blob(b'{"messages": [{"content": "never read /vault/confirm-a/labels.npy"}]}')
        log.append("proposer", "llm_http_request", {"body": ref})
    assert [(f.kind, f.path) for f in _findings(home)] == [("argument", "/vault/seeds.json")]
    (home.audit / "blobs" / str(big.payload["ticket"]).removeprefix("blob:")).unlink()
    assert [(f.seq, f.kind) for f in _findings(home)] == [(0, "unscanned")]


def test_benign_records_are_not_findings(home: Home) -> None:
    with AuditLog(home, None) as log:
        log.append("code-agent", "tool_call", {"tool": "write_file", "args": {"path": "/work/train.py"}})
        log.append(
            "sandbox", "exec_start", {"command": ["python", "-m", "vision.train", "--data", "/data/train"]}
        )
        log.append("gate", "verdict", {"tier": "confirm-a", "vault": f"{home.root}/vault/ledger.sqlite"})
        log.append("proposer", "llm_request", {"tier": "confirm-a", "note": "never read the vault"})
    assert _findings(home) == []


@pytest.mark.parametrize(
    "path",
    [
        "/proc/1/environ",
        "/proc/self/environ",
        "/var/run/docker.sock",
        "/proc/1/root/etc/passwd",
        "/home/x/.local/share/segfactory/vault/gate-pinned/abc/gate/service.py",
        "/srv/h/audit/log.jsonl",
    ],
)
def test_policy_protects_host_escapes_and_home_internals(path: str) -> None:
    assert match_protected(path, load_policy().for_home(Path("/srv/h"))) is not None


def test_invalid_policy_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(DEFAULT_POLICY.read_text().replace("scan_actors:", "scan_actorz:"))
    with pytest.raises(PolicyError, match="invalid"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="missing"):
        load_policy(tmp_path / "absent.yaml")
