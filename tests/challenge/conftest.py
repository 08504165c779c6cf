"""Fixtures: a home with one finished ticket (run by the real runner with the worker stand-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.challenge import ChallengeSetup
from audit import AuditLog, MemoryAnchorStore
from gate.client import GateClient
from runner import TicketStatus, execute_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion
from tests._loopback import serving
from tests.runner import conftest as runner_fixtures
from tests.runner.conftest import BASE_CONFIG, StandinLauncher

RUN = "r1"
home = runner_fixtures.home  # the runner tests' fixtures: a home, an approved tiny version, a scheduler
dataset = runner_fixtures.dataset
scheduler = runner_fixtures.scheduler


def make_ticket(tid: str = "t1", seconds: float = 60) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind="config",
        hypothesis="a smaller learning rate helps",
        change={"optim": {"lr": 0.001}},
        budget={"device_seconds": seconds, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=11,
    )


@pytest.fixture
def marked_home(home: Home) -> Home:
    home.marker.write_text(json.dumps({"profile": "demo", "created": 0.0, "layout": 1}))
    return home


@pytest.fixture
def audit_log(marked_home: Home) -> Iterator[AuditLog]:
    with AuditLog(marked_home, MemoryAnchorStore()) as log:
        yield log


@dataclass
class Finished:
    home: Home
    dataset: DatasetVersion
    dev_f1: float
    setup: ChallengeSetup


@pytest.fixture
def finished(
    marked_home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> Finished:
    """Ticket t1 of run r1, DONE, with its ticket row in people/tickets.jsonl (no claim yet)."""
    ticket = make_ticket()
    people = marked_home.people_dir(RUN)
    people.mkdir(parents=True)
    (people / "tickets.jsonl").write_text(ticket.model_dump_json() + "\n")
    outcome = execute_ticket(
        ticket,
        home=marked_home,
        dataset_version=dataset,
        backend=StandinLauncher(),
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id=RUN,
        scheduler=scheduler,
    )
    assert outcome.status is TicketStatus.DONE, outcome.reason
    assert outcome.evidence is not None
    setup = ChallengeSetup(marked_home, audit_log, backend=StandinLauncher(), scheduler=scheduler)
    return Finished(marked_home, dataset, float(outcome.evidence.dev_metrics["object_f1"]), setup)


def dev_comparison(home: Home, ticket_id: str, f1: float, best_f1: float, win: bool = True) -> None:
    """What agents.services writes for a ticket compared on dev."""
    with (home.people_dir(RUN) / "dev_comparisons.jsonl").open("a") as fh:
        fh.write(
            json.dumps({"ticket_id": ticket_id, "object_f1": f1, "best_object_f1": best_f1, "dev_win": win})
            + "\n"
        )


def challenge_files(home: Home) -> list[Path]:
    return sorted((home.people_dir(RUN) / "challenges").glob("*.json"))


@contextmanager
def served_gate(home: Home) -> Iterator[GateClient]:
    """The home's gate service (``gate.service.create_app``) over real HTTP on loopback, unpadded."""
    from gate.core import Gate
    from gate.service import create_app

    gate = Gate(home.vault, home_root=home.root)
    try:
        with serving(create_app(gate, pad_quantum_s=0)) as url:
            client = GateClient(url=url)
            try:
                yield client
            finally:
                client.close()
    finally:
        gate.ledger.close()
