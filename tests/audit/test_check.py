"""``audit check``: protected-path reads in tool arguments, sandbox events and decoy hits."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit import AuditLog, Finding, check_records, iter_records, load_policy
from audit.check import DEFAULT_POLICY, match_protected
from segfactory.errors import PolicyError
from segfactory.home import Home


def _findings(home: Home) -> list[Finding]:
    return check_records(iter_records(home.audit / "log.jsonl"), load_policy(), home.root)


def test_tool_argument_and_decoy_hit_are_found(home: Home) -> None:
    with AuditLog(home, None) as log:
        log.append("code-agent", "tool_call", {"tool": "run", "args": {"cmd": "cat /work/../vault/confirm-a/labels.npy"}}, run_id="r1")
        log.append("sandbox", "protected_read_attempt", {"path": "/data/holdout/labels.npy", "reader": "cat"}, run_id="r1")
        log.append("proposer", "tool_call", {"tool": "read_file", "args": {"path": f"{home.root}/runs/r1/people/report.md"}})
    findings = _findings(home)
    assert [(f.seq, f.kind) for f in findings] == [(0, "argument"), (1, "event"), (2, "argument")]
    assert findings[0].path == "/work/../vault/confirm-a/labels.npy"
    assert findings[1].path == "/data/holdout/labels.npy" and findings[1].actor == "sandbox"
    assert findings[2].pattern == "{home}/runs/*/people*".replace("{home}", str(home.root))


def test_benign_records_are_not_findings(home: Home) -> None:
    with AuditLog(home, None) as log:
        log.append("code-agent", "tool_call", {"tool": "write_file", "args": {"path": "/work/train.py"}})
        log.append("sandbox", "exec_start", {"command": ["python", "-m", "vision.train", "--data", "/data/train"]})
        log.append("gate", "verdict", {"tier": "confirm-a", "vault": f"{home.root}/vault/ledger.sqlite"})
        log.append("proposer", "llm_request", {"tier": "confirm-a", "note": "never read the vault"})
    assert _findings(home) == []


@pytest.mark.parametrize(
    "path",
    ["/proc/1/environ", "/proc/self/environ", "/var/run/docker.sock", "/proc/1/root/etc/passwd",
     "/home/x/.local/share/segfactory/vault/gate-pinned/abc/gate/service.py", "/srv/h/audit/log.jsonl"],
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
