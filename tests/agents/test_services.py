"""``HostServices`` idempotency (what ``--resume`` relies on) and the host-side dev rule.

The runner is not started here: a finished ticket must be answered from its ``outcome.json``,
and a crashed ticket's folder must be set aside before it runs again. The gate is a stand-in
that only answers ``status`` (its real behaviour is covered in tests/gate and tests/e2e); the
scorer is a stand-in returning fixed probabilities for the dev images.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agents.run_setup import RunSetup
from agents.services import HostServices
from gate.replies import GateStatus
from runner import Evidence, TicketOutcome, TicketStatus
from segfactory.home import Home
from segfactory.layout import BASELINE_MODEL, Lineage
from segfactory.records import Budget, Direction, ExpectedEffect, Ticket, TicketKind, sha256_file
from synthetic import generate
from tests.agents.conftest import Log, gate_status


@dataclass
class StatusOnlyGate:
    best: str

    def status(self) -> GateStatus:
        return gate_status(self.best)


@dataclass
class Dataset:
    dev: Path
    train: Path
    ref: str = "synthetic/v1"
    content_hash: str = "d"


def _ticket(tid: str) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind=TicketKind.CONFIG,
        hypothesis="h",
        change={"epochs": 1},
        budget=Budget(device_seconds=60, epochs=1),
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.01),
        seed=1,
    )


@pytest.fixture
def services(audit_log: Log, tmp_path: Path) -> HostServices:
    home = Home(audit_log.home.root)
    baseline = home.root / BASELINE_MODEL
    baseline.parent.mkdir(parents=True)
    baseline.write_bytes(b"baseline model bytes")
    dev = generate(8, 32, 5).write(tmp_path / "dev")

    def scorer(model: Path, images: np.ndarray) -> np.ndarray:  # predicts nothing: object F1 0
        return np.zeros((len(images), 1, *images.shape[1:]), dtype=np.float32)

    setup = RunSetup(
        home=home,
        run_id="s1",
        backend="bwrap",
        dataset=Dataset(dev=dev, train=dev),
        base_config=Path("configs/run-demo.yaml"),
        gate=StatusOnlyGate(sha256_file(baseline)),
        audit=audit_log,
        dev_margin=0.005,
        scorer=scorer,
    )
    return HostServices(setup)


def _lineage(tid: str) -> Lineage:
    return Lineage(
        ticket_id=tid,
        run_id="s1",
        parent_sha256="b" * 64,
        parent_fingerprint="p",
        config={"epochs": 1},
        dataset="synthetic/v1",
        dataset_hash="d",
        fingerprint="f",
    )


def _done(services: HostServices, tid: str, f1: float) -> None:
    folder = services.setup.home.tickets_dir("s1") / tid
    folder.mkdir(parents=True)
    evidence = Evidence(
        model_sha256="ab" * 32,
        model_bytes=10,
        manifest={},
        manifest_file="m.json",
        dev_metrics={"object_f1": f1, "dice": 0.1},
        threshold=0.5,
    )
    outcome = TicketOutcome(
        ticket_id=tid, run_id="s1", status=TicketStatus.DONE, device_seconds=42.0, evidence=evidence
    )
    (folder / "outcome.json").write_text(outcome.model_dump_json())


def test_a_finished_ticket_is_answered_from_its_outcome_and_compared_on_dev(services: HostServices) -> None:
    _done(services, "s1-t001", 0.30)
    _done(services, "s1-t002", 0.004)
    services.route.execute = lambda *a: pytest.fail("a finished ticket must not train again")  # type: ignore[method-assign]
    services.lineage.plan = lambda ticket: _lineage(ticket.id)  # type: ignore[method-assign]
    win, loss = services.run_ticket(_ticket("s1-t001")), services.run_ticket(_ticket("s1-t002"))
    assert (
        (win.status, win.device_seconds) == ("dev_win", 42.0)
        and win.model_ref
        and win.model_ref.endswith("model.onnx")
    )
    assert loss.status == "dev_loss"  # 0.004 above a best of 0.0 is under the 0.005 margin
    rows = [
        json.loads(line)
        for line in (services.setup.layout.people / "dev_comparisons.jsonl").read_text().splitlines()
    ]
    assert [(r["ticket_id"], r["dev_win"], r["best_object_f1"]) for r in rows] == [
        ("s1-t001", True, 0.0),
        ("s1-t002", False, 0.0),
    ]


def test_a_crashed_ticket_folder_is_set_aside_and_the_ticket_runs_once_more(
    services: HostServices, audit_log: Log
) -> None:
    folder = services.setup.home.tickets_dir("s1") / "s1-t003"
    (folder / "work").mkdir(parents=True)
    ran: list[str] = []

    def execute(
        ticket: Ticket, parent: object, lineage: Lineage, wall_left_s: float | None = None
    ) -> TicketOutcome:
        ran.append(ticket.id)
        assert not folder.exists()  # the runner refuses a ticket id that already has a folder
        return TicketOutcome(ticket_id=ticket.id, run_id="s1", status=TicketStatus.FAILED, reason="boom")

    services.route.execute = execute  # type: ignore[method-assign]
    services.lineage.plan = lambda ticket: _lineage(ticket.id)  # type: ignore[method-assign]
    outcome = services.run_ticket(_ticket("s1-t003"))
    assert ran == ["s1-t003"] and outcome.status == "failed" and outcome.reason == "boom"
    aside = list((folder.parent / ".crashed").iterdir())
    assert len(aside) == 1 and (aside[0] / "work").is_dir()
    assert audit_log.events("ticket_set_aside")[0]["ticket_id"] == "s1-t003"


def test_a_best_without_a_host_copy_is_a_clear_error(services: HostServices) -> None:
    services.setup.gate = StatusOnlyGate("f" * 64)
    with pytest.raises(Exception, match="has no host copy"):
        services.lineage.best_model()


def test_the_dev_rule_scores_a_ticket_at_the_win_rules_threshold_not_its_own(services: HostServices) -> None:
    """A ticket that lowers its own threshold until its dev F1 looks high still compares at 0.5."""
    _done(services, "s1-t004", 0.9)
    folder = services.setup.home.tickets_dir("s1") / "s1-t004"
    outcome = TicketOutcome.model_validate_json((folder / "outcome.json").read_text())
    assert outcome.evidence is not None
    moved = outcome.evidence.model_copy(update={"threshold": 0.05})  # the ticket's own config said 0.05
    (folder / "outcome.json").write_text(outcome.model_copy(update={"evidence": moved}).model_dump_json())
    (folder / "model.onnx").write_bytes(b"a model the stand-in scorer scores as empty")
    services.lineage.plan = lambda ticket: _lineage(ticket.id)  # type: ignore[method-assign]
    result = services.run_ticket(_ticket("s1-t004"))
    assert result.status == "dev_loss"  # rescored at 0.5 by the host: object F1 0, not the claimed 0.9
    row = [
        json.loads(line)
        for line in (services.setup.layout.people / "dev_comparisons.jsonl").read_text().splitlines()
    ][-1]
    assert row["object_f1"] == 0.0 and row["threshold"] == 0.5
