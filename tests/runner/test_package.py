"""Packaging tickets: DONE tickets' models, staged and hash-checked, packaged in the sandbox into
one model that the host scores like any other; every bad input is a named refusal."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import runner._staging as staging
from audit import AuditLog
from runner import MemberModel, TicketOutcome, TicketRunner, TicketStatus, execute_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.splits import write_split
from synthetic.versions import DatasetVersion, create_version
from tests.runner.conftest import BASE_CONFIG, StandinLauncher
from tests.vision._data import draw

needs_bwrap = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


@pytest.fixture
def data(home: Home, tmp_path: Path) -> DatasetVersion:
    """An approved version with enough training images for a carve of 10%: 200 train, 12 dev, 32 px."""
    for name, n, seed in (("train", 200, 0), ("dev", 12, 1)):
        images, masks, meta, defects = draw(n, 32, seed)
        write_split(tmp_path / "src-big" / name, images, masks, meta, defects, {"generator": "tests.discs"})
    return create_version(
        home.root, "big", {s: tmp_path / "src-big" / s for s in ("train", "dev")}, approve_it=True
    )


def trained(tid: str, seed: int) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind="config",
        hypothesis="a member",
        change={"optim": {"lr": 0.001}},
        budget={"device_seconds": 60, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=seed,
    )


def packaging(tid: str = "pkg", change: dict[str, object] | None = None, kind: str = "package") -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind=kind,
        hypothesis="an ensemble of the best two, flipped, with a chosen threshold, beats each",
        change=change
        if change is not None
        else {"flips": ["h"], "thresholds": [0.4, 0.5], "min_sizes": [1, 2]},
        budget={"device_seconds": 300, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=0,
    )


@pytest.fixture
def runner_for(home: Home, audit_log: AuditLog, scheduler: Scheduler) -> Any:
    def make(backend: Any) -> TicketRunner:
        return TicketRunner(home, backend, audit_log, run_id="r1", scheduler=scheduler)

    return make


@pytest.fixture
def members(runner_for: Any, data: DatasetVersion) -> list[MemberModel]:
    done = [
        runner_for(StandinLauncher(mode="seeded")).run(trained(f"m{s}", s), data, dict(BASE_CONFIG))
        for s in (1, 2)
    ]
    assert all(o.status == TicketStatus.DONE for o in done), [o.reason for o in done]
    return [o.member() for o in done]


def refused(outcome: TicketOutcome, home: Home, launcher: StandinLauncher, match: str) -> None:
    assert outcome.status == TicketStatus.REFUSED, outcome
    assert match in str(outcome.reason), outcome.reason
    assert launcher.requests == []
    assert not (home.tickets_dir("r1") / "pkg").exists()
    assert sorted(p.name for p in home.tickets_dir("r1").iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("unknown", "no readable outcome"),
        ("wrong-hash", "is not the model.onnx"),
        ("repeated", "repeat a model"),
        ("none", "needs 1 to 8 members"),
        ("too-many", "needs 1 to 8 members"),
    ],
)
def test_members_that_are_not_this_homes_copied_out_models_are_refused(
    home: Home, data: DatasetVersion, runner_for: Any, members: list[MemberModel], case: str, match: str
) -> None:
    first = members[0]
    chosen = {
        "unknown": [first, first.model_copy(update={"ticket_id": "ghost", "sha256": "e" * 64})],
        "wrong-hash": [first, members[1].model_copy(update={"sha256": "f" * 64})],
        "repeated": [first, first],
        "none": [],
        "too-many": [first] * 9,
    }[case]
    launcher = StandinLauncher()
    refused(runner_for(launcher).package(packaging(), data, chosen), home, launcher, match)


def test_a_member_swapped_after_planning_is_refused(
    home: Home, data: DatasetVersion, runner_for: Any, members: list[MemberModel]
) -> None:
    model = home.tickets_dir("r1") / members[1].ticket_id / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\x00")
    launcher = StandinLauncher()
    refused(
        runner_for(launcher).package(packaging(), data, members),
        home,
        launcher,
        "changed after it was planned",
    )


@pytest.mark.parametrize(
    ("change", "kind", "match"),
    [
        ({"gate_threshold": 0.3}, "package", "which the host sets"),
        ({"holdout_seed": 9}, "package", "which the host sets"),
        ({"flips": ["sideways"]}, "package", "package change is invalid"),
        ({"min_sizes": [40]}, "package", "package change is invalid"),
        ({}, "config", "does not run here"),
    ],
)
def test_a_bad_packaging_ticket_is_refused_before_anything_starts(
    home: Home,
    data: DatasetVersion,
    runner_for: Any,
    members: list[MemberModel],
    change: dict[str, object],
    kind: str,
    match: str,
) -> None:
    launcher = StandinLauncher()
    refused(
        runner_for(launcher).package(packaging(change=change, kind=kind), data, members),
        home,
        launcher,
        match,
    )


def test_members_trained_with_different_carves_are_refused(
    home: Home, data: DatasetVersion, runner_for: Any, members: list[MemberModel]
) -> None:
    kept = home.tickets_dir("r1") / members[1].ticket_id / "host_config.yaml"
    config = yaml.safe_load(kept.read_text())
    kept.write_text(yaml.safe_dump({**config, "validation": {"fraction": 0.2, "seed": 0}}))
    launcher = StandinLauncher()
    refused(runner_for(launcher).package(packaging(), data, members), home, launcher, "held out different")


def test_a_carve_too_small_to_choose_on_is_refused_on_the_host(
    home: Home, dataset: DatasetVersion, runner_for: Any, members: list[MemberModel]
) -> None:
    launcher = StandinLauncher()
    refused(
        runner_for(launcher).package(packaging(), dataset, members),
        home,
        launcher,
        "choosing a threshold needs",
    )


def test_execute_ticket_refuses_a_package_ticket(
    home: Home, data: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    outcome = execute_ticket(
        packaging(),
        home=home,
        dataset_version=data,
        backend=StandinLauncher(),
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert outcome.status == TicketStatus.REFUSED and "TicketRunner.package" in str(outcome.reason)


def test_a_member_rewritten_after_staging_is_caught_at_mount_time(
    home: Home,
    data: DatasetVersion,
    runner_for: Any,
    members: list[MemberModel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    place = staging.place

    def place_then_swap(staged: Path, ticket_dir: Path, name: str) -> Path:
        target = place(staged, ticket_dir, name)
        os.chmod(target / "1.onnx", 0o644)
        (target / "1.onnx").write_bytes(b"another model")
        return target

    monkeypatch.setattr(staging, "place", place_then_swap)
    launcher = StandinLauncher()
    outcome = runner_for(launcher).package(packaging(), data, members)
    assert outcome.status == TicketStatus.FAILED and "rewritten after staging" in str(outcome.reason)
    assert launcher.requests == []


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("bwrap", marks=needs_bwrap),
        pytest.param("docker", marks=[pytest.mark.slow, pytest.mark.docker]),
    ],
)
def test_a_package_runs_in_the_sandbox_and_is_scored_like_any_model(
    home: Home, data: DatasetVersion, runner_for: Any, members: list[MemberModel], backend: str
) -> None:
    if backend == "docker":
        from tests.sandbox.conftest import docker_problem

        if problem := docker_problem():
            pytest.skip(f"no Docker engine could be started: {problem}")
    outcome = runner_for(backend).package(packaging(), data, members)
    assert outcome.status == TicketStatus.DONE, (outcome.reason, outcome.attempts)
    assert outcome.members == members
    folder = home.tickets_dir("r1") / "pkg"
    assert sorted(p.name for p in (folder / "members").iterdir()) == ["0.onnx", "1.onnx"]
    evidence = outcome.evidence
    assert evidence is not None and evidence.threshold == 0.5  # the win rule's: the package folds its own in
    assert evidence.checkpoint_sha256 is None and evidence.dev_metrics["n_images"] == 12
    reported = outcome.sandbox_reported or {}
    assert reported["usable"] and reported["mask_mismatch_pixels"] == 0
    assert [m["sha256"] for m in reported["members"]] == [m.sha256 for m in members]
    assert reported["choice"]["images"] >= 8  # chosen on the carve of train, which the sandbox saw alone
    assert np.isfinite(evidence.dev_metrics["object_f1"])
