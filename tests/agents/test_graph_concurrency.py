"""The loop with ``concurrency`` > 1: tickets train together, then each is gated, judged and recorded
once, in queue order, and a batch never passes the run's caps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agents.graph import FactoryState, LoopDeps, build_graph, run_loop
from segfactory.budgets import RunCaps
from segfactory.records import Ticket
from tests.agents._stubs import StubFactoryServices, make_services
from tests.agents.conftest import Log
from tests.agents.test_graph import _deps_of


def _deps(services: StubFactoryServices, log: Log, *, concurrency: int, tickets: int = 20) -> LoopDeps:
    deps = _deps_of(services, log, concurrency=concurrency)
    deps.caps = RunCaps(wall_seconds=600, device_seconds=600, tickets=tickets, llm_tokens=0)
    return deps


class _InFlight:
    """Counts the stub tickets training at the same moment (each holds its slot for a while)."""

    def __init__(self, hold_s: float = 0.3) -> None:
        self.hold_s, self.now, self.peak, self._lock = hold_s, 0, 0, threading.Lock()

    def __call__(self, ticket: Ticket) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.hold_s)
        with self._lock:
            self.now -= 1


def _history_ids(state: FactoryState) -> list[str]:
    return [h.ticket_id for h in state.history]


def test_two_tickets_train_at_once_and_each_is_judged_once_in_queue_order(
    audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    services.on_run = flight = _InFlight()
    state = run_loop(build_graph(_deps(services, audit_log, concurrency=2), tmp_path / "c.sqlite"), "c1")

    assert flight.peak == 2  # the batch really trained together
    assert sorted(_history_ids(state)) == sorted(services.runs)  # every ticket trained is recorded, once
    assert len(set(services.runs)) == len(services.runs) == state.tickets_run
    assert state.device_seconds == 10 * state.tickets_run  # each charged its own device time
    batches = audit_log.events("tickets_trained_together")
    assert batches and all(len(b["tickets"]) == 2 and b["concurrency"] == 2 for b in batches)
    for batch in batches:  # judged in the order they were queued
        first, second = (_history_ids(state).index(t) for t in batch["tickets"])
        assert first < second
    # promotion is still only after both WINs: the replicate's confirm-b WIN comes first
    promoted = [d.ticket_id for d in state.decisions if d.decision == "promote"]
    assert promoted == ["c1-t001"] and services.queries.index("c1-t001-rep") > services.queries.index(
        "c1-t001"
    )
    assert not state.trained


def test_the_partner_of_a_promoted_ticket_is_judged_before_the_loop_re_analyses(
    audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    services.on_run = _InFlight(hold_s=0.05)
    state = run_loop(build_graph(_deps(services, audit_log, concurrency=2), tmp_path / "p.sqlite"), "p1")
    promote_at = next(i for i, h in enumerate(state.history) if h.ticket_id == "p1-t001-rep")
    partner = next(
        b["tickets"] for b in audit_log.events("tickets_trained_together") if "p1-t001-rep" in b["tickets"]
    )
    other = next(t for t in partner if t != "p1-t001-rep")
    assert _history_ids(state).index(other) == promote_at + 1  # recorded right after, not dropped
    # the round after the promotion starts with the ticket after that partner
    assert state.rounds[1].first_ticket == promote_at + 3


def test_a_batch_never_passes_the_ticket_cap(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    services.dev = {k: "dev_loss" for k in services.dev}
    state = run_loop(
        build_graph(_deps(services, audit_log, concurrency=2, tickets=3), tmp_path / "t.sqlite"), "t1"
    )
    assert state.tickets_run == 3 == len(services.runs)
    assert state.stop_reason == "budget: 3 tickets run"


def test_concurrency_one_trains_one_ticket_at_a_time(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    services.on_run = flight = _InFlight(hold_s=0.05)
    state = run_loop(build_graph(_deps(services, audit_log, concurrency=1), tmp_path / "one.sqlite"), "o1")
    assert flight.peak == 1 and not audit_log.events("tickets_trained_together")
    assert state.tickets_run == len(services.runs)


def test_a_promotion_the_gate_refuses_because_the_best_moved_is_a_recorded_reject(
    audit_log: Log, tmp_path: Path
) -> None:
    """Two tickets win confirm-a against the same best and their replicates train together: the
    first promotion moves the best, and the gate refuses the second (its confirm-a WIN was against
    the old best). The loop records a reject with the gate's reason and goes on."""
    from segfactory.errors import GateError

    class MovingBest(StubFactoryServices):
        def promote(self, ticket_id: str) -> None:
            if self.promoted:
                raise GateError(
                    f"gate POST /promote answered 409: ticket {ticket_id!r} won confirm-a against "
                    "an earlier best; promotion refused"
                )
            super().promote(ticket_id)

    base = make_services()
    services = MovingBest(
        dev={**base.dev, "epochs": "dev_win"}, gate={**base.gate, "epochs": base.gate["optim.lr"]}
    )
    state = run_loop(build_graph(_deps(services, audit_log, concurrency=2), tmp_path / "m.sqlite"), "m1")
    refused = [d for d in state.decisions if d.reason.startswith("promotion refused by the gate")]
    assert len(services.promoted) == 1 and len(refused) >= 1
    assert all(d.decision == "reject" for d in refused)
    assert not state.stop_reason.startswith("proposer failed")
