"""One candidate through the agents' path: which queries it spends and when it is promoted."""

from __future__ import annotations

from agents.judge import Judge
from controls.pipeline import run_candidate
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind, Verdict
from tests.controls._fakes import FakeServices, ListSink


def ticket(tid: str = "r-t000") -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.SWEEP_TPE,
        kind=TicketKind.CONFIG,
        hypothesis="h",
        seed=1,
        budget=Budget(device_seconds=60, epochs=2),
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
    )


def test_a_dev_loss_spends_no_query() -> None:
    services = FakeServices(score_of=lambda t: 0.49)
    result = run_candidate(services, Judge(ListSink()), ticket(), lambda: 7)
    assert result.status == "dev_loss" and result.dev_score == 0.49 and result.decision is None
    assert services.queries == {"confirm-a": [], "confirm-b": []}


def test_win_and_replicate_win_promotes_with_a_host_seed() -> None:
    services = FakeServices(score_of=lambda t: 0.6)
    result = run_candidate(services, Judge(ListSink()), ticket(), lambda: 4242)
    assert result.promoted and services.promoted == ["r-t000"]
    assert services.queries == {"confirm-a": ["r-t000"], "confirm-b": ["r-t000-rep"]}
    replicate = services.tickets[1]
    assert replicate.replicate_of == "r-t000" and replicate.seed == 4242
    assert result.device_seconds == 100.0


def test_confirm_a_no_win_rejects_without_a_replicate() -> None:
    services = FakeServices(score_of=lambda t: 0.6, verdict_of=lambda t, tier: Verdict.NO_WIN)
    result = run_candidate(services, Judge(ListSink()), ticket(), lambda: 1)
    assert result.decision == "reject" and result.replicate_id is None and len(services.tickets) == 1


def test_a_replicate_that_loses_on_dev_spends_no_confirm_b_query() -> None:
    services = FakeServices(score_of=lambda t: 0.4 if t.replicate_of else 0.6)
    result = run_candidate(services, Judge(ListSink()), ticket(), lambda: 1)
    assert result.decision == "reject" and result.replicate_status == "dev_loss"
    assert services.queries["confirm-b"] == [] and not services.promoted


def test_a_failed_ticket_is_a_recorded_result() -> None:
    result = run_candidate(FakeServices(score_of=lambda t: None), Judge(ListSink()), ticket(), lambda: 1)
    assert result.status == "failed" and result.dev_score is None and result.reason == "boom"
