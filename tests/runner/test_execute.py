"""execute_ticket: refusal before start, OOM retry under a real rlimit, host-computed evidence,
and a planted symlink or FIFO in place of the model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from audit import AuditLog, iter_records
from runner import TicketStatus, _execute, execute_ticket
from runner import _ticket as runner_ticket
from runner._workspace import SIZED_SHARE, ticket_config
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Budget, Ticket
from synthetic.splits import read_split, write_split
from synthetic.versions import DatasetVersion, create_version
from tests.runner.conftest import BASE_CONFIG, StandinLauncher
from tests.vision._data import draw
from vision.metrics import aggregate, per_image_metrics

MIB = 2**20


def make_ticket(tid: str = "t1", seconds: float = 60, change: dict[str, object] | None = None) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind="config",
        hypothesis="a smaller learning rate helps",
        change=change or {"optim": {"lr": 0.001}},
        budget={"device_seconds": seconds, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=11,
    )


def events(home: Home) -> list[str]:
    return [record.event for record in iter_records(home.audit / "log.jsonl")]


def run(
    ticket: Ticket,
    home: Home,
    dataset: DatasetVersion,
    launcher: StandinLauncher,
    audit_log: AuditLog,
    scheduler: Scheduler,
    **kw: Any,
) -> Any:
    return execute_ticket(
        ticket,
        home=home,
        dataset_version=dataset,
        backend=launcher,
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
        **kw,
    )


def test_budget_beyond_policy_is_refused_before_anything_starts(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    launcher = StandinLauncher()
    outcome = run(make_ticket(seconds=10 * 3600), home, dataset, launcher, audit_log, scheduler)
    assert outcome.status == TicketStatus.REFUSED
    assert "exceeds the policy limit" in str(outcome.reason)
    assert launcher.requests == []
    assert not home.tickets_dir("r1").exists()
    assert events(home) == ["ticket_refused"]


def test_path_outside_workspace_and_bad_config_are_refused(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    launcher = StandinLauncher()
    escaping = run(
        make_ticket(change={"model": {"encoder_weights": "/root/.ssh/id_rsa"}}),
        home,
        dataset,
        launcher,
        audit_log,
        scheduler,
    )
    invalid = run(make_ticket("t2", change={"batch_size": -3}), home, dataset, launcher, audit_log, scheduler)
    assert escaping.status == invalid.status == TicketStatus.REFUSED
    assert "outside the ticket's workspace" in str(escaping.reason)
    assert "batch_size" in str(invalid.reason)
    assert launcher.requests == [] and not home.tickets_dir("r1").exists()


def expected_dev_metrics(model: Path, dev_dir: Path, threshold: float) -> dict[str, float]:
    """The same metrics by an independent path: onnxruntime in this process on the same bytes."""
    dev = read_split(dev_dir)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    prob = session.run(["prob"], {"image": dev.images[:, None]})[0]
    return aggregate(per_image_metrics(prob[:, 0], dev.masks, threshold=threshold))


@pytest.mark.bwrap
def test_evidence_is_host_computed_not_sandbox_reported(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    outcome = run(make_ticket(), home, dataset, StandinLauncher(), audit_log, scheduler)
    assert outcome.status == TicketStatus.DONE, outcome.reason
    evidence = outcome.evidence
    assert evidence is not None
    model = home.tickets_dir("r1") / "t1" / "model.onnx"
    assert evidence.dev_metrics == pytest.approx(expected_dev_metrics(model, dataset.dev, 0.5), abs=1e-6)
    assert outcome.sandbox_reported is not None
    assert outcome.sandbox_reported["dev_metrics"]["object_f1"] == 0.999
    assert evidence.dev_metrics["object_f1"] != 0.999
    assert evidence.manifest["train"]["content_hash"] == dataset.split_hashes["train"]
    manifest = json.loads(Path(evidence.manifest_file).read_text())
    assert manifest["image_hashes"] == [row["sha256"] for row in read_split(dataset.train).image_meta]
    assert json.loads((model.parent / "outcome.json").read_text())["status"] == "DONE"
    assert events(home)[-4:] == ["model_copied_out", "workspace_removed", "evidence_computed", "ticket_done"]
    # the host keeps what it copied out (and the worker's curve, for people); the workspace goes
    assert not (model.parent / "work").exists() and (model.parent / "learning_curve.jsonl").is_file()


def test_oom_is_retried_at_half_the_batch_under_a_real_rlimit(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    # batch 16 asks for 512 MiB, batch 8 for 256 MiB: a 400 MiB data limit fails the first, passes the second
    launcher = StandinLauncher(memory_bytes=400 * MIB)
    outcome = run(
        make_ticket(change={"batch_size": 16}),
        home,
        dataset,
        launcher,
        audit_log,
        scheduler,
        scorer=lambda _model, images: np.zeros((len(images), 1, *images.shape[1:]), np.float32),
    )
    assert outcome.status == TicketStatus.DONE, outcome.reason
    assert [(a.batch_size, a.grad_accum, a.oom) for a in outcome.attempts] == [(16, 1, True), (8, 2, False)]
    assert outcome.attempts[0].memory_estimate_bytes and outcome.attempts[1].memory_estimate_bytes
    # the retry's training step is smaller; the dev scoring's share of the estimate does not halve
    assert outcome.attempts[1].memory_estimate_bytes <= outcome.attempts[0].memory_estimate_bytes
    assert events(home).count("ticket_attempt") == 2


def test_oom_at_every_batch_fails_as_a_recorded_state(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    launcher = StandinLauncher(memory_bytes=400 * MIB, mib_per_sample=1024)  # even batch 1 is too big
    outcome = run(make_ticket(change={"batch_size": 4}), home, dataset, launcher, audit_log, scheduler)
    assert outcome.status == TicketStatus.FAILED
    assert "out of memory" in str(outcome.reason)
    assert len(outcome.attempts) == 3  # 4 -> 2 -> 1, then nothing smaller
    assert str(outcome.traceback_ref).startswith("blob:")
    assert "TicketFailed" in audit_log.blobs.path_for(str(outcome.traceback_ref)).read_text()


@pytest.mark.parametrize("mode", ["symlink", "fifo"])
def test_planted_model_is_refused_and_recorded(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler, mode: str, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.onnx"
    secret.write_bytes(b"not for the sandbox")
    outcome = run(
        make_ticket(), home, dataset, StandinLauncher(mode=mode, target=str(secret)), audit_log, scheduler
    )
    assert outcome.status == TicketStatus.FAILED
    assert "UnsafeArtifact" in str(outcome.reason)
    assert not (home.tickets_dir("r1") / "t1" / "model.onnx").exists()
    assert outcome.evidence is None


def test_a_retry_neither_follows_a_planted_config_nor_reuses_old_output(
    home: Home,
    dataset: DatasetVersion,
    audit_log: AuditLog,
    scheduler: Scheduler,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner_ticket, "discard_workspace", lambda work: True)  # to look at attempt 0
    target = tmp_path / "host-file.txt"
    target.write_text("host content\n")
    launcher = StandinLauncher(mode="plant-config", memory_bytes=400 * MIB, target=str(target))
    outcome = run(
        make_ticket(change={"batch_size": 16}),
        home,
        dataset,
        launcher,
        audit_log,
        scheduler,
        scorer=lambda _model, images: np.zeros((len(images), 1, *images.shape[1:]), np.float32),
    )
    assert outcome.status == TicketStatus.DONE, outcome.reason
    assert [a.batch_size for a in outcome.attempts] == [16, 8]
    assert target.read_text() == "host content\n"
    assert (home.tickets_dir("r1") / "t1" / "work" / "out.attempt-0" / "learning_curve.jsonl").is_file()


def test_an_unreachable_gate_fails_the_ticket_but_keeps_its_evidence(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler, tmp_path: Path
) -> None:
    from gate.client import GateClient

    gate = GateClient(socket_path=tmp_path / "no-gate.sock")  # the real client; nothing listens there
    outcome = run(
        make_ticket(),
        home,
        dataset,
        StandinLauncher(),
        audit_log,
        scheduler,
        gate=gate,
        scorer=lambda _model, images: np.zeros((len(images), 1, *images.shape[1:]), np.float32),
    )
    assert outcome.status == TicketStatus.FAILED
    assert str(outcome.reason).startswith("gate submission failed")
    assert outcome.evidence is not None and outcome.verdict is None


def test_the_gate_is_told_the_training_data_by_its_version_ref_never_a_path(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    from segfactory.records import CoarseVerdict, Verdict

    seen: list[str | None] = []

    class RecordingGate:  # the gate answers INVALID (and quarantines) for anything but NAME/vK
        def submit(
            self,
            model_path: Path | str,
            train_data: str | None,
            ticket_id: str,
            replicate_of: str | None = None,
            run_id: str | None = None,
        ) -> CoarseVerdict:
            seen.append(train_data)
            return CoarseVerdict(
                ticket_id=ticket_id, tier="confirm-a", verdict=Verdict.NO_WIN, queries_left=3
            )

    outcome = run(
        make_ticket(),
        home,
        dataset,
        StandinLauncher(),
        audit_log,
        scheduler,
        gate=RecordingGate(),
        scorer=lambda _model, images: np.zeros((len(images), 1, *images.shape[1:]), np.float32),
    )
    assert outcome.verdict is not None and outcome.verdict.verdict == Verdict.NO_WIN
    assert seen == [dataset.ref]


def test_a_ticket_gets_no_more_than_the_runs_wall_and_none_below_the_minimum(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    from runner._execute import MIN_WALL_S, TIMEOUT_MARGIN_S

    launcher = StandinLauncher()
    late = run(make_ticket("w1"), home, dataset, launcher, audit_log, scheduler, wall_left_s=MIN_WALL_S - 1)
    assert late.status == TicketStatus.FAILED and launcher.requests == []
    assert f"not started: the run has {MIN_WALL_S - 1:.0f} s of wall time left" in str(late.reason)
    bound = run(make_ticket("w2", seconds=60), home, dataset, launcher, audit_log, scheduler, wall_left_s=45)
    assert bound.status == TicketStatus.DONE, bound.reason
    assert launcher.requests[0].timeout_s <= 45 < 60 + TIMEOUT_MARGIN_S  # the wall bound it, not the budget
    free = run(make_ticket("w3", seconds=60), home, dataset, launcher, audit_log, scheduler)
    assert free.status == TicketStatus.DONE and launcher.requests[1].timeout_s == 60 + TIMEOUT_MARGIN_S


def test_with_two_tickets_at_once_on_the_cpu_each_trains_on_its_share_of_the_cores(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.scheduler import Admission, MemoryEstimator, SchedulerSettings
    from tests.runner.conftest import PROFILED

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    settings = SchedulerSettings(reserve_bytes=0, concurrency=2)
    shared = Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )
    assert shared.cpu_share() == 1
    launcher = StandinLauncher()
    done = run(make_ticket("s1"), home, dataset, launcher, audit_log, shared)
    assert done.status == TicketStatus.DONE, done.reason
    assert launcher.requests[0].cpus == 1
    import yaml

    from runner._launch import HOST_CONFIG_FILE

    assert yaml.safe_load((home.tickets_dir("r1") / "s1" / HOST_CONFIG_FILE).read_text())["threads"] == 1
    started = next(r.payload for r in iter_records(home.audit / "log.jsonl") if r.event == "ticket_started")
    assert started["cpus"] == 1 and started["config"]["threads"] == 1

    alone = run(make_ticket("s2"), home, dataset, launcher, audit_log, scheduler_alone(home))
    assert alone.status == TicketStatus.DONE and launcher.requests[1].cpus is None  # the policy's own limit


def scheduler_alone(home: Home) -> Scheduler:
    from runner.scheduler import Admission, MemoryEstimator, SchedulerSettings
    from tests.runner.conftest import PROFILED

    settings = SchedulerSettings(reserve_bytes=0)
    return Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )


def test_a_cap_that_would_cut_the_images_a_version_adds_is_refused_before_anything_starts(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler, tmp_path: Path
) -> None:
    """A top-up puts its images after the base's; a cap below its size trains the parent's images."""
    base = read_split(dataset.train)
    images, masks, meta, defects = draw(6, 32, 5)
    renamed = {str(m["id"]): f"added-{i}" for i, m in enumerate(meta)}
    write_split(
        tmp_path / "topped" / "train",
        np.concatenate([base.images, images]),
        np.concatenate([base.masks, masks]),
        [*base.image_meta, *({**m, "id": renamed[str(m["id"])]} for m in meta)],
        [*base.defects, *({**d, "image_id": renamed[str(d["image_id"])]} for d in defects)],
        {"generator": "tests.topup", "appended": 6},
    )
    topped = create_version(
        home.root,
        "discs-topped",
        {"train": tmp_path / "topped" / "train", "dev": None},
        parent=dataset.ref,
        approve_it=True,
    )
    launcher = StandinLauncher()
    capped = execute_ticket(
        make_ticket("c1"),
        home=home,
        dataset_version=topped,
        backend=launcher,
        base_config={**BASE_CONFIG, "max_train_images": len(base)},
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert capped.status == TicketStatus.REFUSED and launcher.requests == []
    assert (
        f"max_train_images={len(base)} would cut 6 of the 6 images dataset version {topped.ref} adds"
        in str(capped.reason)
    )
    lifted = execute_ticket(
        make_ticket("c2"),
        home=home,
        dataset_version=topped,
        backend=launcher,
        base_config={**BASE_CONFIG, "max_train_images": None},
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert lifted.status == TicketStatus.DONE, lifted.reason
    # the same cap on a version that adds nothing is the cap's ordinary use: a quick run on fewer images
    plain = execute_ticket(
        make_ticket("c3"),
        home=home,
        dataset_version=dataset,
        backend=launcher,
        base_config={**BASE_CONFIG, "max_train_images": 16},
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert plain.status == TicketStatus.DONE, plain.reason


def test_a_ticket_does_not_start_below_the_free_space_reserve(
    home: Home,
    dataset: DatasetVersion,
    audit_log: AuditLog,
    scheduler: Scheduler,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    launcher = StandinLauncher()
    fs = os.statvfs(home.root)
    monkeypatch.setattr(_execute, "FREE_BYTES_RESERVE", fs.f_bavail * fs.f_frsize + 1024**3)
    outcome = run(make_ticket(), home, dataset, launcher, audit_log, scheduler)
    assert outcome.status == TicketStatus.REFUSED and launcher.requests == []
    assert "below the reserve" in str(outcome.reason) and "GiB is free" in str(outcome.reason)
    monkeypatch.undo()
    if fs.f_files:  # a filesystem that counts inodes
        monkeypatch.setattr(_execute, "FREE_INODES_RESERVE", fs.f_favail + 10**6)
        refused = run(make_ticket("t2"), home, dataset, launcher, audit_log, scheduler)
        assert refused.status == TicketStatus.REFUSED and "inodes are free" in str(refused.reason)


def _budgeted(epochs: int, change: dict[str, object] | None = None) -> Ticket:
    return make_ticket(seconds=90, change=change).model_copy(
        update={"budget": Budget(device_seconds=90, epochs=epochs)}
    )


def test_a_ticket_asking_more_epochs_than_its_recipe_trains_what_its_budget_holds() -> None:
    base = {**BASE_CONFIG, "epochs": 4}
    longer = ticket_config(base, _budgeted(10))  # a budget plan's rung or final
    assert longer["epochs"] == 10 and longer["time_budget_s"] == pytest.approx(SIZED_SHARE * 90)
    same = ticket_config(base, _budgeted(4))  # the recipe's own length: exactly that, as before
    assert same["epochs"] == 4 and same["time_budget_s"] is None
    fixed = ticket_config(base, _budgeted(8, {"epochs": 8}))  # a patch that names its epochs keeps them
    assert fixed["epochs"] == 8 and fixed["time_budget_s"] is None
    nnunet = ticket_config({**base, "engine": "nnunet"}, _budgeted(10))  # its engine sizes itself
    assert nnunet["time_budget_s"] is None
    # a final continuing a sized rung's recipe is sized by its own budget, not the rung's
    rung = {**base, "epochs": 10, "time_budget_s": 81.0}
    final = _budgeted(10).model_copy(update={"budget": Budget(device_seconds=47, epochs=10)})
    assert ticket_config(rung, final)["time_budget_s"] == pytest.approx(SIZED_SHARE * 47)
    shorter = ticket_config(rung, _budgeted(4))  # a proposer's ticket on that recipe: its own cap
    assert shorter["epochs"] == 4 and shorter["time_budget_s"] == pytest.approx(SIZED_SHARE * 90)
    replicate = _budgeted(10).model_copy(update={"id": "t1-rep", "replicate_of": "t1", "seed": 12})
    assert {**ticket_config(base, replicate), "seed": 0} == {**longer, "seed": 0}  # same inputs, new seed
