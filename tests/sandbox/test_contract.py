"""The SandboxBackend contract, run against every backend."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox import SandboxBackend, SandboxEvent, SandboxResult, SandboxSpec, load_policy
from segfactory.errors import PolicyError
from segfactory.home import SOURCE_ROOT

Run = Callable[..., SandboxResult]


def test_exit_code_and_streams_pass_through(run_in: Run) -> None:
    result = run_in("echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.stdout.data, result.stderr.data) == (7, b"out\n", b"err\n")
    assert not result.timed_out and not result.oom_killed and not result.stdout.truncated


def test_workspace_is_rw_cwd_and_data_is_ro(run_in: Run, tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.mkdir()
    (train / "images.npy").write_bytes(b"x" * 10)
    result = run_in(
        "pwd; wc -c < /data/train/images.npy; echo made > out.txt; touch /data/train/y 2>&1 || echo ro",
        data={"train": train},
    )
    assert result.stdout.data.split(b"\n")[:2] == [b"/work", b"10"]
    assert b"ro" in result.stdout.data and not (train / "y").exists()
    assert (tmp_path / "ws" / "out.txt").read_text() == "made\n"


def test_host_environment_never_passes(run_in: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEGF_HOST_SECRET", "hunter2")
    result = run_in("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'", env={"MINE": "yes"})
    assert b"hunter2" not in result.stdout.data and b"MINE=yes" in result.stdout.data


def test_runs_as_non_root_without_network(run_in: Run) -> None:
    result = run_in("id -u; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    uid, *interfaces = result.stdout.data.decode().split()
    assert int(uid) == load_policy().uid and interfaces == ["lo"]


def test_ticket_code_runs_at_the_policys_niceness(run_in: Run) -> None:
    """Training yields the CPU to the gate's scorer and the host: everything inside is niced."""
    result = run_in("nice")  # coreutils' nice with no command prints the current niceness
    assert int(result.stdout.data.decode()) >= load_policy().nice > 0  # on the host's (docker: dockerd's)


def test_output_past_the_cap_is_truncated_with_its_size(run_in: Run) -> None:
    cap = load_policy().output.stdout_bytes
    result = run_in(f"head -c {cap + 12345} /dev/zero")
    assert result.stdout.truncated and result.stdout.size == cap + 12345 and len(result.stdout.data) == cap


@pytest.mark.slow
def test_timeout_is_enforced(run_in: Run) -> None:
    start = time.monotonic()
    result = run_in("sleep 60", timeout_s=1)
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - start < 1 + load_policy().kill_grace_s + 5


def test_decoy_open_is_seen_live_by_the_host(backend: SandboxBackend, tmp_path: Path) -> None:
    seen: list[SandboxEvent] = []
    spec = SandboxSpec(
        command=["sh", "-c", "head -c 8 /data/holdout/labels.npy >/dev/null"], workspace=tmp_path
    )
    result = backend.run(spec, on_event=seen.append)
    hits = [e for e in result.events if e.kind == "protected_read_attempt"]
    assert [e.path for e in hits] == ["/data/holdout/labels.npy"] and seen == result.events
    assert not hits[0].sandbox_reported


def test_audit_hook_reports_python_opens_as_sandbox_reported(run_in: Run) -> None:
    result = run_in(["python", "-c", "open('/vault/seeds.json').read()"])
    reported = [e for e in result.events if e.kind == "file_open"]
    assert result.exit_code == 0 and [e.path for e in reported] == ["/vault/seeds.json"]
    assert all(e.sandbox_reported for e in reported)
    assert any(e.kind == "protected_read_attempt" and not e.sandbox_reported for e in result.events)


def test_no_decoys_when_the_spec_says_so(run_in: Run) -> None:
    result = run_in("ls /data/holdout 2>&1 || true", decoys=False)
    assert not result.events and b"No such file" in result.stdout.data


@pytest.mark.parametrize("field", ["workspace", "data", "extra_ro"])
def test_repo_root_is_refused_before_start(backend: SandboxBackend, tmp_path: Path, field: str) -> None:
    options: dict[str, dict[str, object]] = {
        "workspace": {"workspace": SOURCE_ROOT},
        "data": {"data": {"train": SOURCE_ROOT}},
        "extra_ro": {"extra_ro": {"/src": SOURCE_ROOT}},
    }
    mounts = options[field]
    spec = SandboxSpec(**{"command": ["true"], "workspace": tmp_path, **mounts})
    with pytest.raises(PolicyError, match="repository root"):
        backend.run(spec)


def test_limits_above_policy_are_refused_before_start(backend: SandboxBackend, tmp_path: Path) -> None:
    policy = load_policy()
    too_much = policy.defaults.model_copy(update={"memory_bytes": policy.maxima.memory_bytes + 1})
    with pytest.raises(PolicyError, match="memory_bytes"):
        backend.run(SandboxSpec(command=["true"], workspace=tmp_path, limits=too_much))
    assert os.listdir(tmp_path) == []
