"""Tickets that continue from a parent's weights: the checkpoint is copied out and hashed, then
staged into the child's folder, hash-checked against the plan, hashed again at mount time, and
mounted read-only. Every refusal names its reason and nothing starts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import runner._staging as staging
from audit import AuditLog, iter_records
from runner import InitFrom, TicketOutcome, TicketStatus, execute_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion
from tests.runner.conftest import BASE_CONFIG, StandinLauncher


def ticket(tid: str, change: dict[str, object] | None = None, seed: int = 11) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind="config",
        hypothesis="training longer from the incumbent helps",
        change=change if change is not None else {"optim": {"lr": 0.001}},
        budget={"device_seconds": 60, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=seed,
    )


@pytest.fixture
def go(home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler) -> Any:
    def run(t: Ticket, launcher: StandinLauncher | None = None, **kw: Any) -> TicketOutcome:
        return execute_ticket(
            t,
            home=home,
            dataset_version=dataset,
            backend=launcher or StandinLauncher(),
            base_config=dict(BASE_CONFIG),
            audit=audit_log,
            run_id="r1",
            scheduler=scheduler,
            **kw,
        )

    return run


@pytest.fixture
def parent(go: Any) -> TicketOutcome:
    outcome: TicketOutcome = go(ticket("parent"))
    assert outcome.status == TicketStatus.DONE, outcome.reason
    return outcome


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(home: Home) -> list[str]:
    return sorted(p.name for p in home.tickets_dir("r1").iterdir() if p.name.startswith("."))


def test_a_done_ticket_copies_out_its_checkpoint_and_records_its_hash(
    home: Home, parent: TicketOutcome
) -> None:
    copied = home.tickets_dir("r1") / "parent" / "model.safetensors"
    assert parent.evidence is not None and parent.evidence.checkpoint_sha256 == sha256(copied)
    assert parent.evidence.checkpoint_bytes == copied.stat().st_size
    events = [r for r in iter_records(home.audit / "log.jsonl") if r.event == "model_copied_out"]
    assert [e.payload["checkpoint_sha256"] for e in events] == [sha256(copied)]
    assert parent.continuation() == InitFrom(run_id="r1", ticket_id="parent", sha256=sha256(copied))


def test_a_child_continues_from_a_staged_read_only_copy(home: Home, parent: TicketOutcome, go: Any) -> None:
    launcher = StandinLauncher()
    child = go(ticket("child", seed=12), launcher, init_from=parent.continuation())
    assert child.status == TicketStatus.DONE, child.reason
    assert child.init_from == parent.continuation()
    staged = home.tickets_dir("r1") / "child" / "init"
    (request,) = launcher.requests
    assert request.extra_ro == {"/init": staged}
    assert request.command[-2:] == ["--init-from", "/init/model.safetensors"]
    assert sha256(staged / "model.safetensors") == parent.continuation().sha256
    assert (staged / "model.safetensors").stat().st_mode & 0o777 == 0o444
    assert not staged.is_relative_to(
        home.tickets_dir("r1") / "child" / "work"
    )  # never in the sandbox's rw tree
    started = [r for r in iter_records(home.audit / "log.jsonl") if r.event == "ticket_started"]
    assert started[-1].payload["init_from"]["sha256"] == parent.continuation().sha256
    assert child.evidence is not None and child.evidence.checkpoint_sha256 != parent.continuation().sha256
    assert leftovers(home) == []


def refused(outcome: TicketOutcome, home: Home, launcher: StandinLauncher, match: str) -> None:
    assert outcome.status == TicketStatus.REFUSED, outcome
    assert match in str(outcome.reason), outcome.reason
    assert launcher.requests == []
    assert not (home.tickets_dir("r1") / "child").exists()
    assert leftovers(home) == []


def test_an_init_from_naming_no_ticket_of_this_home_is_refused(
    home: Home, parent: TicketOutcome, go: Any
) -> None:
    launcher = StandinLauncher()
    for ref in (
        parent.continuation().model_copy(update={"ticket_id": "nobody"}),
        parent.continuation().model_copy(update={"run_id": "r0"}),
    ):
        refused(go(ticket("child"), launcher, init_from=ref), home, launcher, "no readable outcome")
    with pytest.raises(ValidationError):  # a path, not an id: refused where the record is made
        InitFrom(run_id="r1", ticket_id="../../datasets", sha256=parent.continuation().sha256)


def test_a_plan_whose_hash_is_not_the_recorded_one_is_refused(
    home: Home, parent: TicketOutcome, go: Any
) -> None:
    launcher = StandinLauncher()
    ref = parent.continuation().model_copy(update={"sha256": "0" * 64})
    refused(go(ticket("child"), launcher, init_from=ref), home, launcher, "is not the model.safetensors")


def test_a_checkpoint_swapped_after_planning_is_refused(home: Home, parent: TicketOutcome, go: Any) -> None:
    copied = home.tickets_dir("r1") / "parent" / "model.safetensors"
    copied.write_bytes(b"other weights, planted after the plan was made")
    launcher = StandinLauncher()
    refused(
        go(ticket("child"), launcher, init_from=parent.continuation()),
        home,
        launcher,
        "changed after it was planned",
    )


def test_a_checkpoint_replaced_by_a_symlink_is_refused(
    home: Home, parent: TicketOutcome, go: Any, tmp_path: Path
) -> None:
    copied = home.tickets_dir("r1") / "parent" / "model.safetensors"
    same = tmp_path / "same.safetensors"
    same.write_bytes(copied.read_bytes())  # the planned bytes, but reached through a link
    copied.unlink()
    os.symlink(same, copied)
    launcher = StandinLauncher()
    refused(go(ticket("child"), launcher, init_from=parent.continuation()), home, launcher, "symlink")


def test_a_parent_without_a_checkpoint_cannot_be_continued(home: Home, go: Any) -> None:
    bare = go(ticket("bare"), StandinLauncher(mode="no-checkpoint"))
    assert bare.status == TicketStatus.DONE and bare.evidence is not None
    assert bare.evidence.checkpoint_sha256 is None
    with pytest.raises(Exception, match="no copied-out checkpoint"):
        bare.continuation()
    ref = InitFrom(run_id="r1", ticket_id="bare", sha256="1" * 64)
    launcher = StandinLauncher()
    refused(go(ticket("child"), launcher, init_from=ref), home, launcher, "copied out no model.safetensors")


def test_a_planted_checkpoint_symlink_fails_its_own_ticket(home: Home, go: Any, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("not for the sandbox")
    outcome = go(ticket("planter"), StandinLauncher(mode="symlink-checkpoint", target=str(secret)))
    assert outcome.status == TicketStatus.FAILED and "UnsafeArtifact" in str(outcome.reason)
    assert not (home.tickets_dir("r1") / "planter" / "model.safetensors").exists()


def test_another_architecture_is_refused_on_the_host(home: Home, parent: TicketOutcome, go: Any) -> None:
    launcher = StandinLauncher()
    wider = ticket("child", change={"model": {"name": "unet-mobilenetv3", "decoder_width": 64}})
    refused(go(wider, launcher, init_from=parent.continuation()), home, launcher, "model.decoder_width")


def test_a_ticket_cannot_name_init_from_in_its_change(home: Home, parent: TicketOutcome, go: Any) -> None:
    launcher = StandinLauncher()
    planted = ticket("child", change={"init_from": "/work/model.safetensors"})
    outcome = go(planted, launcher)
    refused(outcome, home, launcher, "init_from")


def test_a_staged_copy_rewritten_before_the_start_is_caught_at_mount_time(
    home: Home, parent: TicketOutcome, go: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = staging.place

    def place_then_swap(staged: Path, ticket_dir: Path, name: str) -> Path:
        target = place(staged, ticket_dir, name)
        swapped = target / "model.safetensors"
        os.chmod(swapped, 0o644)
        swapped.write_bytes(b"rewritten between staging and the sandbox start")
        return target

    monkeypatch.setattr(staging, "place", place_then_swap)
    launcher = StandinLauncher()
    outcome = go(ticket("child"), launcher, init_from=parent.continuation())
    assert outcome.status == TicketStatus.FAILED
    assert "rewritten after staging" in str(outcome.reason)
    assert launcher.requests == []  # the sandbox never started
    assert outcome.init_from == parent.continuation()
