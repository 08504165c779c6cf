"""Policy, mount rules and registry: refused before any sandbox starts."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sandbox import SandboxSpec, get_backend, known_backends
from sandbox._capture import CappedBuffer
from sandbox._decoys import create_decoys
from sandbox._paths import forbidden_reason
from sandbox._policy import POLICY_PATH, load_policy
from segfactory.errors import PolicyError
from segfactory.home import SOURCE_ROOT
from tests.conftest import CliResult


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"sandbox backend 'k8s' is not registered; known: bwrap, docker"):
        get_backend("k8s")
    assert known_backends() == ["bwrap", "docker"]


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("network", "bridge", "network"),
        ("read_only_root", False, "read_only_root"),
        ("uid", 0, "uid"),
        ("surprise", 1, "surprise"),
    ],
)
def test_unsafe_policy_is_refused(tmp_path: Path, key: str, value: object, match: str) -> None:
    raw = yaml.safe_load(POLICY_PATH.read_text())
    raw[key] = value
    path = tmp_path / "sandbox.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PolicyError, match=match):
        load_policy(path)


def test_defaults_above_maxima_are_refused(tmp_path: Path) -> None:
    raw = yaml.safe_load(POLICY_PATH.read_text())
    raw["defaults"]["pids"] = raw["maxima"]["pids"] + 1
    path = tmp_path / "sandbox.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PolicyError, match="pids"):
        load_policy(path)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for sub in ("vault", "audit", "datasets/d/v1", "runs/r1/tickets/t1", "runs/r1/people"):
        (home / sub).mkdir(parents=True)
    (home / "home.json").write_text(json.dumps({"profile": "demo"}))
    return home


@pytest.mark.parametrize(
    ("rel", "allowed"),
    [
        ("", False),
        ("vault", False),
        ("audit", False),
        ("runs/r1/people", False),
        ("runs/r1/people/x", False),
        ("runs", False),
        ("runs/r1", False),
        ("runs/r1/.", False),
        ("runs/r1/tickets/..", False),
        ("datasets/d/v1", True),
        ("runs/r1/tickets/t1", True),
        ("runs/r1/tickets", True),
    ],
)
def test_home_paths(tmp_path: Path, rel: str, allowed: bool) -> None:
    home = _home(tmp_path)
    assert (forbidden_reason(home / rel) is None) == allowed


@pytest.mark.bwrap
@pytest.mark.parametrize("rel", ["runs", "runs/r1"])
def test_a_run_holding_people_is_never_a_workspace(
    tmp_path: Path, rel: str, cli: Callable[..., CliResult]
) -> None:
    """Through the real command: a workspace that would contain a run's people/ is refused before
    any sandbox starts, and nothing of people/ comes out."""
    home = _home(tmp_path)
    secret = secrets.token_hex(16)
    (home / "runs" / "r1" / "people" / "report.md").write_text(secret)
    result = cli(
        "sandbox",
        "exec",
        "--home",
        str(home),
        "--backend",
        "bwrap",
        "--workspace",
        str(home / rel),
        "--",
        "sh",
        "-c",
        "cat /work/people/report.md /work/r1/people/report.md",
        timeout=60,
    )
    assert result.returncode != 0 and "refusing to mount" in result.stderr and "people/" in result.stderr
    assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "path", [SOURCE_ROOT, SOURCE_ROOT.parent, Path("/"), Path("/var/run"), Path("/run/docker.sock")]
)
def test_never_mountable(path: Path) -> None:
    assert forbidden_reason(path) is not None


def test_package_dirs_and_symlinks_to_forbidden_paths(tmp_path: Path) -> None:
    assert forbidden_reason(SOURCE_ROOT / "vision") is None
    link = tmp_path / "innocent"
    link.symlink_to(_home(tmp_path) / "vault")
    assert "home" in str(forbidden_reason(link))


def test_spec_rejects_reserved_targets_and_bad_names(tmp_path: Path) -> None:
    for extra in (
        {"/work/x": tmp_path},
        {"relative": tmp_path},
        {"/opt/../etc": tmp_path},
        {"/bin/x": tmp_path},
    ):
        with pytest.raises(ValueError):
            SandboxSpec(command=["true"], workspace=tmp_path, extra_ro=extra)
    for name in ("holdout", "../x"):
        with pytest.raises(ValueError):
            SandboxSpec(command=["true"], workspace=tmp_path, data={name: tmp_path})


def test_capped_buffer_counts_past_the_cap() -> None:
    buf = CappedBuffer(5)
    for chunk in (b"abc", b"defg", b"hij"):
        buf.write(chunk)
    out = buf.output()
    assert (out.data, out.size, out.truncated) == (b"abcde", 10, True)


def test_decoys_are_valid_npy_without_using_disk(tmp_path: Path) -> None:
    import numpy as np

    _mounts, files = create_decoys(tmp_path)
    labels = next(h for h, inside in files.items() if inside == "/data/holdout/labels.npy")
    array = np.load(labels, mmap_mode="r")
    assert array.shape == (500, 256, 256) and array.dtype == np.uint8
    assert Path(labels).stat().st_blocks * 512 < 64 * 1024


@pytest.mark.bwrap
def test_a_sandbox_that_cannot_start_is_an_error_not_a_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox._bwrap import BwrapBackend
    from segfactory.errors import SandboxError

    original = BwrapBackend._bwrap_args
    monkeypatch.setattr(
        BwrapBackend, "_bwrap_args", lambda self, *a: ["bwrap", "--no-such-option", *original(self, *a)[1:]]
    )
    with pytest.raises(SandboxError, match="bwrap could not start the sandbox"):
        get_backend("bwrap").run(SandboxSpec(command=["true"], workspace=tmp_path))
