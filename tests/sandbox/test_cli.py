"""``segfactory sandbox build | verify | exec`` through the real entry point."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from sandbox import SandboxBackend
from sandbox._policy import load_policy
from sandbox._records import Output, SandboxResult
from sandbox._verify import check_mounts, evaluate
from tests.sandbox.conftest import docker_problem


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


@pytest.mark.bwrap
def test_exec_passes_the_exit_code_and_output_through(cli, tmp_home: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli(
        "sandbox",
        "exec",
        "--home",
        str(tmp_home),
        "--backend",
        "bwrap",
        "--",
        "sh",
        "-c",
        "echo hello; exit 5",
    )
    assert result.returncode == 5 and result.stdout == "hello\n"


@pytest.mark.bwrap
def test_exec_json_and_audit_records(cli, tmp_home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tmp_home.mkdir()
    (tmp_home / "home.json").write_text(json.dumps({"profile": "demo"}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result = cli(
        "sandbox",
        "exec",
        "--home",
        str(tmp_home),
        "--backend",
        "bwrap",
        "--json",
        "--workspace",
        str(workspace),
        "--timeout",
        "30s",
        "--",
        "sh",
        "-c",
        "cat /vault/seeds.json > /dev/null; echo x > out",
    )
    payload = json.loads(result.stdout)
    assert result.returncode == 0 and payload["exit_code"] == 0 and (workspace / "out").is_file()
    assert [e["path"] for e in payload["events"]] == ["/vault/seeds.json"]
    records = [json.loads(line) for line in (tmp_home / "audit" / "log.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records] == [
        "sandbox_exec_start",
        "protected_read_attempt",
        "sandbox_exec_end",
    ]
    assert {r["actor"] for r in records} == {"sandbox"}


def test_engine_down_says_how_to_start_it(cli, tmp_home: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli(
        "sandbox",
        "verify",
        "--home",
        str(tmp_home),
        "--backend",
        "docker",
        env=_env(DOCKER_HOST="unix:///nonexistent/docker.sock"),
    )
    assert result.returncode != 0 and result.stdout == ""
    assert "Docker engine does not answer" in result.stderr and "dockerd" in result.stderr
    assert "--backend bwrap" in result.stderr and result.stderr.count("\n") == 1


def test_unknown_backend_is_a_usage_error(cli, tmp_home: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("sandbox", "exec", "--home", str(tmp_home), "--backend", "k8s", "--", "true")
    assert result.returncode == 2 and "known: bwrap, docker" in result.stderr


def _report(**changes: object) -> dict:
    base = {
        "uid": 10001,
        "euid": 10001,
        "gid": 10001,
        "canary_hits": [],
        "files_scanned": 10,
        "status": {k: "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
        | {"NoNewPrivs": "1"},
        "mountinfo": ["1 0 0:5 / / ro,relatime - tmpfs tmpfs ro", "2 1 0:6 / /work rw - ext4 /dev/x rw"],
        "interfaces": ["lo"],
        "network": {"1.1.1.1:53": "OSError"},
        "docker_socket": [],
        "root_writable": False,
        "cwd": "/work",
        "decoy_opened": True,
        "cgroup": {},
        "gpus": {"visible": [], "models": {}, "cuda_visible_devices": None},
        "userns": {"unshare_r": {"exit": 1, "stderr": "unshare failed"}, "syscall_ok": False},
        "rlimits": {"RLIMIT_FSIZE": [load_policy().defaults.file_bytes] * 2, "RLIMIT_DATA": [-1, -1]},
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    ("changes", "failing"),
    [
        ({}, {"limits"}),  # no cgroup readback at all: the limits are not proven
        ({"canary_hits": ["/x/canary"]}, {"canary", "limits"}),
        ({"interfaces": ["lo", "eth0"]}, {"network", "limits"}),
        ({"uid": 0}, {"uid", "limits"}),
        (
            {"userns": {"unshare_r": {"exit": 0, "stderr": ""}, "syscall_ok": True}},
            {"user_namespaces", "limits"},
        ),
        (
            {"userns": {"unshare_r": {"exit": 1, "stderr": ""}, "syscall_ok": True}},
            {"user_namespaces", "limits"},
        ),
        ({"userns": {}}, {"user_namespaces", "limits"}),  # a probe that did not try proves nothing
        ({"mountinfo": ["1 0 0:5 / / rw - tmpfs tmpfs rw"]}, {"mounts", "read_only_root", "limits"}),
        (
            {"gpus": {"visible": [0], "models": {"0": "NVIDIA H200"}}},
            {"gpus", "limits"},
        ),  # one nobody assigned
        ({"gpus": None}, {"gpus", "limits"}),  # a probe that did not look
    ],
)
def test_verify_fails_on_every_deviation(changes: dict, failing: set[str]) -> None:
    report = _report(**changes)
    if "mountinfo" in changes:
        report["root_writable"] = True
    empty = Output()
    result = SandboxResult(
        backend="x",
        exit_code=0,
        stdout=empty,
        stderr=empty,
        timed_out=False,
        oom_killed=False,
        duration_s=0.1,
        events=[],
    )
    checks = evaluate(report, result, {}, load_policy().defaults, [])
    assert {c.name for c in checks if not c.ok} == failing | {"decoy_detection"}


def test_mount_check_names_an_exposed_protected_dir() -> None:
    repo = Path(__file__).resolve().parents[2]
    dev_line = [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if line.split()[4] == "/"
    ][0].split()
    inside = [f"9 1 {dev_line[2]} {dev_line[3].rstrip('/')}{repo} /src ro - ext4 x ro"]
    check = check_mounts(inside, [repo])
    assert not check.ok and "exposes" in check.detail["problems"][0]


@pytest.mark.slow
def test_verify_is_green_and_leaves_the_vault_as_it_was(backend: SandboxBackend, tmp_home: Path) -> None:
    (tmp_home / "vault").mkdir(parents=True)
    (tmp_home / "home.json").write_text(json.dumps({"profile": "demo"}))
    (tmp_home / "vault" / "ledger.sqlite").write_bytes(b"x")
    report = backend.verify(tmp_home)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert [p.name for p in (tmp_home / "vault").iterdir()] == ["ledger.sqlite"]


@pytest.mark.slow
@pytest.mark.docker
def test_build_then_verify_json(cli, tmp_home: Path) -> None:  # type: ignore[no-untyped-def]
    if problem := docker_problem():
        pytest.skip(f"no Docker engine could be started: {problem}")
    result = cli("sandbox", "build", "--home", str(tmp_home), "--json")
    payload = json.loads(result.stdout)
    assert result.returncode == 0 and payload["ok"] and payload["build"]["method"] == "import"


@pytest.mark.slow
def test_probe_finds_a_visible_canary_by_name_and_by_content(backend: SandboxBackend, tmp_path: Path) -> None:
    from sandbox import SandboxSpec
    from sandbox._verify import DECOY_PROBE, planted_canaries

    exposed, work = tmp_path / "exposed", tmp_path / "work"
    exposed.mkdir()
    work.mkdir()
    with planted_canaries([exposed]) as (name, content):
        (exposed / "renamed.bin").write_bytes(content)
        digest = hashlib.sha256(content).hexdigest()
        command = [
            "python",
            "-I",
            "/opt/segfactory/inside/probe.py",
            name,
            str(len(content)),
            digest,
            DECOY_PROBE,
        ]
        result = backend.run(SandboxSpec(command=command, workspace=work, extra_ro={"/mnt/leak": exposed}))
    hits = json.loads(result.stdout.data)["canary_hits"]
    assert sorted(hits) == [f"/mnt/leak/{name}", "/mnt/leak/renamed.bin"]
