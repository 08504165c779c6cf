"""``run``: the next ticket, or the next batch of tickets, trained through the host services.

With ``concurrency`` above one the step takes up to that many tickets from the head of the queue
(never past the ticket cap) and trains them at once, each admitted by the run's one scheduler.
When the run goes on only for replicates owed to confirm-a WINs (the stop rules would end it
without them), it takes those replicates alone.
The first is gated, judged and recorded now; the others wait in ``trained`` and are judged one
at a time, in queue order, before anything else happens.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from agents.state import FactoryState, RunOutcome, Trained, Update
from agents.steps._base import Step
from agents.steps.record import owed_only
from segfactory.records import Ticket

log = logging.getLogger(__name__)


class TrainStep(Step):
    def run(self, state: FactoryState) -> Update:
        if state.trained:  # trained together with an earlier ticket: its turn to be gated and judged
            first, *rest = state.trained
            return {"trained": rest, "current": first.ticket, "outcome": first.outcome, "verdict": None}
        queue = list(state.queue)
        if owed_only(self.d, state):  # past the budget: the owed replicates, not a fresh ticket beside them
            owed = [q for q in queue if q.replicate_of]
            queue = owed + [q for q in queue if not q.replicate_of]
            room = len(owed)
        else:
            room = max(1, self.d.caps.tickets - state.tickets_run)  # a batch never passes the ticket cap
        batch = [queue.pop(0) for _ in range(min(max(1, self.d.concurrency), len(queue), room))]
        wall_left = self.d.caps.wall_seconds - (self.d.clock() - state.started_at)
        for ticket in batch:
            log.info("running ticket %s: %s", ticket.id, ticket.hypothesis[:80])
        outcomes = self._train(state, batch, wall_left)
        return {
            "queue": queue,
            "current": batch[0],
            "outcome": outcomes[0],
            "trained": [Trained(ticket=t, outcome=o) for t, o in zip(batch[1:], outcomes[1:], strict=True)],
            "verdict": None,
            "device_seconds": state.device_seconds + sum(o.device_seconds for o in outcomes),
            "tickets_run": state.tickets_run + len(batch),
        }

    def _train(self, state: FactoryState, batch: list[Ticket], wall_left: float) -> list[RunOutcome]:
        """Each ticket of the batch through ``run_ticket``, all at once when there are several."""
        if len(batch) == 1:
            return [self.d.services.run_ticket(batch[0], wall_left_s=wall_left)]
        self.audit(
            state,
            "tickets_trained_together",
            {"tickets": [t.id for t in batch], "concurrency": self.d.concurrency},
        )
        with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix="ticket") as pool:
            return list(pool.map(lambda t: self.d.services.run_ticket(t, wall_left_s=wall_left), batch))


__all__ = ["TrainStep"]
