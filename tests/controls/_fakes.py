"""A stand-in for ``HostServices`` (runner + gate) with scripted dev scores and gate answers.

It keeps the bookkeeping a real gate's ledger keeps (queries per tier) and the sandbox runs the
audit log would show, so that the pipeline's accounting can be checked without training.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.state import RunOutcome
from segfactory.records import CoarseVerdict, Ticket, Verdict

DEV_MARGIN = 0.005


@dataclass
class FakeServices:
    score_of: Callable[[Ticket], float | None]  # None: the ticket fails
    verdict_of: Callable[[Ticket, str], Verdict] = lambda t, tier: Verdict.WIN
    best: float = 0.5
    seconds: float = 50.0
    tickets: list[Ticket] = field(default_factory=list)
    queries: dict[str, list[str]] = field(default_factory=lambda: {"confirm-a": [], "confirm-b": []})
    promoted: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        self.tickets.append(ticket)
        score = self.score_of(ticket)
        if score is None:
            return RunOutcome(
                ticket_id=ticket.id, status="failed", device_seconds=self.seconds, reason="boom"
            )
        self.scores[ticket.id] = score
        win = score - self.best >= DEV_MARGIN
        return RunOutcome(
            ticket_id=ticket.id,
            status="dev_win" if win else "dev_loss",
            device_seconds=self.seconds,
            model_ref=f"/m/{ticket.id}.onnx",
        )

    def dev_score(self, ticket_id: str) -> float | None:
        return self.scores.get(ticket_id)

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        tier = "confirm-b" if replicate_of else "confirm-a"
        self.queries[tier].append(ticket.id)
        return CoarseVerdict(
            ticket_id=ticket.id, tier=tier, verdict=self.verdict_of(ticket, tier), queries_left=9
        )

    def promote(self, ticket_id: str) -> None:
        self.promoted.append(ticket_id)
        self.best = self.scores[ticket_id]

    def set_reference(self, ticket_id: str) -> None:
        self.best = self.scores[ticket_id]


class ListSink:
    """An audit sink that keeps records in memory (the judge writes its decisions here)."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, str, Mapping[str, object]]] = []

    def append(self, actor: Any, event: str, payload: Mapping[str, object], run_id: str | None = None) -> Any:
        self.records.append((actor, event, payload))

    def put_blob(self, data: bytes) -> str:
        raise AssertionError("no blobs expected")
