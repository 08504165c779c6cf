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
    /proc/1/environ: the decoy hit (host inotify) and both opens (the audit hook) are findings,
    as records of the sandbox, each naming the ticket."""
    findings = _findings(ticket_home)
    seen = [(f.actor, f.event, f.path) for f in findings]
    # the host's inotify thread and the hook's socket deliver independently: any order, each once
    assert sorted(seen) == [
        ("sandbox", "file_open", "/proc/1/environ"),
        ("sandbox", "file_open", DECOY_READ),
        ("sandbox", "protected_read_attempt", DECOY_READ),
    ], findings
    hook = [s for s in seen if s[1] == "file_open"]
    assert hook == [("sandbox", "file_open", DECOY_READ), ("sandbox", "file_open", "/proc/1/environ")]
    assert {f.ticket_id for f in findings} == {HOSTILE_TICKET}


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


def _sandbox_event(kind: str, path: str | None = None, **detail: object) -> dict[str, object]:
    return {
        "kind": kind,
        "ts": 1.0,
        "path": path,
        "sandbox_reported": True,
        "detail": detail,
        "ticket_id": "t1",
        "attempt": 1,
    }


def test_every_attempt_the_hook_saw_is_a_finding_naming_its_ticket(home: Home) -> None:
    """An attempt is evidence even when it failed: each hook record is one finding, with what it
    named (a path, an address, a library and symbol, a command, a gap's reason)."""
    events = [
        _sandbox_event("file_open", f"{home.root}/vault/seeds.json", op="open"),
        _sandbox_event("file_write", "/opt/pwned", op="open"),
        _sandbox_event("socket_call", op="connect", address="('10.0.2.2', 80)"),
        _sandbox_event("ctypes_call", op="dlsym", library="(the process's own symbols)", symbol="open"),
        _sandbox_event("process_spawn", op="popen", argv='["python", "-I"]'),
        _sandbox_event("hook_malformed", raw="{", truncated=True),
        _sandbox_event("monitoring_gap", reason="audit hook flood"),
    ]
    with AuditLog(home, None) as log:
        for event in events:
            log.append("sandbox", str(event["kind"]), event, run_id="r1")
    assert [(f.event, f.kind, f.path, f.ticket_id) for f in _findings(home)] == [
        ("file_open", "event", f"{home.root}/vault/seeds.json", "t1"),
        ("file_write", "event", "/opt/pwned", "t1"),
        ("socket_call", "event", "('10.0.2.2', 80)", "t1"),
        ("ctypes_call", "event", "(the process's own symbols): open", "t1"),
        ("process_spawn", "event", '["python", "-I"]', "t1"),
        ("hook_malformed", "event", "", "t1"),
        ("monitoring_gap", "event", "audit hook flood", "t1"),
    ]
    assert _findings(home)[0].pattern == "{home}/vault*".replace("{home}", str(home.root))


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
        "/srv/h/gate-run/host.token",
        "/srv/h/gate-run/agent.token",
        "/srv/h/gate-run/gate.sock",
        "/elsewhere/gate-run/host.token",
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
