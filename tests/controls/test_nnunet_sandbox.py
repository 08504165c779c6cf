"""The nnunet arm's ticket through the real runner and the real bwrap sandbox (a tiny nnU-Net run).

It shows that the sandbox imports nnunetv2 from the mounted venv, that nnU-Net's folders stay
beneath the ticket's /work, that the ticket may use the arm's budget past the profile's
per-ticket cap, and that the copied-out model passes the gate's intake and is scored on the host.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit import AuditLog, MemoryAnchorStore
from controls.nnunet_arm import NNUNET_MAX_EPOCHS, nnunet_ticket
from runner import TicketCaps, TicketStatus, execute_ticket
from runner import _ticket as runner_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from synthetic.splits import write_split
from synthetic.versions import DatasetVersion, create_version
from tests.vision._data import draw

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
TINY = {
    "iterations_per_epoch": 3,
    "val_iterations": 1,
    "data_workers": 0,
    "max_val_cases": 4,
    "parity_images": 4,
}


@pytest.fixture
def home(tmp_home: Path) -> Home:
    tmp_home.mkdir(parents=True)
    return Home(tmp_home)


@pytest.fixture
def dataset(home: Home, tmp_path: Path) -> DatasetVersion:
    for name, n, seed in (("train", 24, 0), ("dev", 8, 1)):
        images, masks, meta, defects = draw(n, 32, seed)
        write_split(tmp_path / "src" / name, images, masks, meta, defects, {"generator": "tests.discs"})
    return create_version(
        home.root, "discs", {s: tmp_path / "src" / s for s in ("train", "dev")}, approve_it=True
    )


@pytest.fixture
def audit_log(home: Home) -> Iterator[AuditLog]:
    with AuditLog(home, MemoryAnchorStore()) as log:
        yield log


def test_the_nnunet_ticket_trains_in_the_sandbox(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nnU-Net's own plans file in the workspace is read below: keep the finished workspace
    monkeypatch.setattr(runner_ticket, "discard_workspace", lambda work: True)
    ticket = nnunet_ticket("r1", 150.0, seed=5)
    ticket = ticket.model_copy(
        update={"change": {**ticket.change, "epochs": 2, "nnunet": {**ticket.change["nnunet"], **TINY}}}
    )
    policy = TicketCaps(max_device_seconds=150.0, max_epochs=NNUNET_MAX_EPOCHS)
    base = {
        "model": {"name": "unet-mobilenetv3"},
        "epochs": 1,
        "batch_size": 8,
        "threads": 2,
        "device": "cpu",
    }
    outcome = execute_ticket(
        ticket,
        home=home,
        dataset_version=dataset,
        backend="bwrap",
        base_config=base,
        audit=audit_log,
        run_id="r1",
        scheduler=Scheduler.for_home(home),
        budget_policy=policy,
    )
    assert outcome.status == TicketStatus.DONE, (outcome.reason, [a.model_dump() for a in outcome.attempts])
    assert (
        outcome.evidence is not None and outcome.evidence.dev_metrics["n_images"] == 8
    )  # scored on the host
    plan = (outcome.sandbox_reported or {})["plan"]
    assert plan["patch_size"] == [32, 32] and plan["epochs"] == 2 and plan["iterations"] == 6
    assert (outcome.sandbox_reported or {})["parity"]["ok"]
    work = home.tickets_dir("r1") / ticket.id / "work"
    assert (work / "out" / "nnunet" / "preprocessed" / "Dataset501_voids" / "nnUNetPlans.json").is_file()
    refused = execute_ticket(
        ticket.model_copy(update={"id": "r1-capped"}),
        home=home,
        dataset_version=dataset,
        backend="bwrap",
        base_config=base,
        audit=audit_log,
        run_id="r1",
        budget_policy=TicketCaps(max_device_seconds=120.0, max_epochs=NNUNET_MAX_EPOCHS),
    )
    assert (
        refused.status == TicketStatus.REFUSED
    )  # the profile's per-ticket cap would refuse the arm's budget
