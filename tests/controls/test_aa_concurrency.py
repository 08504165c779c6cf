"""A/A runs at the scheduler's concurrency: never more at once than allowed, results in run order."""

from __future__ import annotations

import threading
import time
from itertools import count

from agents.judge import Judge
from agents.state import RunOutcome
from controls.aa import run_aa
from segfactory.records import Budget, Ticket
from tests.controls._fakes import FakeServices, ListSink


class SlowServices(FakeServices):
    """Each ticket takes a moment; the most tickets in flight at once is kept."""

    def __init__(self) -> None:
        super().__init__(score_of=lambda t: 0.40, best=0.5)
        self.lock, self.running, self.peak = threading.Lock(), 0, 0

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.05)
        try:
            return super().run_ticket(ticket)
        finally:
            with self.lock:
                self.running -= 1


def test_concurrent_aa_respects_the_limit_and_keeps_run_order() -> None:
    services, seeds = SlowServices(), count(100)
    result = run_aa(
        9,
        services,
        Judge(ListSink()),
        run_id="aa",
        budget=Budget(device_seconds=60, epochs=2),
        make_seed=lambda: next(seeds),
        set_reference=lambda ticket_id: None,
        concurrency=3,
    )
    assert 1 < services.peak <= 3
    assert [r.ticket_id for r in result.runs] == [f"aa-aa{i:03d}" for i in range(9)]
    seeds_by_id = {t.id: t.seed for t in services.tickets}
    assert [seeds_by_id[f"aa-aa{i:03d}"] for i in range(9)] == list(range(101, 110))  # drawn in run order
    assert result.summary().gate_rule.runs == 9


def test_concurrency_one_is_sequential() -> None:
    services = SlowServices()
    run_aa(
        3,
        services,
        Judge(ListSink()),
        run_id="aa",
        budget=Budget(device_seconds=60, epochs=2),
        make_seed=lambda: 1,
        set_reference=lambda ticket_id: None,
    )
    assert services.peak == 1
