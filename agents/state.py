"""The loop's records: what a ticket's route returns to the graph, and what the graph checkpoints.

``FactoryState`` is the LangGraph state itself, a record of records: tickets, run outcomes,
coarse verdicts, verdict history, the judge's decisions. Nothing in it holds a score of any kind:
dev-win flags and budget counters only (trust rules 4, 7, 9).

The checkpointer stores these records and revives them as the same types after a restart, kill
-9 included, and revives nothing else: :data:`CHECKPOINT_TYPES` is the complete list of classes
a checkpoint may construct (anything else in a checkpoint stays inert data, so a tampered
checkpoint cannot name a callable to run).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from agents.context import DevAnalysis, VerdictEntry
from agents.judge import Decision, JudgeDecision
from segfactory.records import (
    Arm,
    Budget,
    CoarseVerdict,
    Direction,
    ExpectedEffect,
    Recommendation,
    Ticket,
    TicketKind,
    Tier,
    Verdict,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunOutcome(_Frozen):
    """What the host learnt from training a ticket. No score: the dev comparison is a flag."""

    ticket_id: str
    status: Literal[
        "dev_win", "dev_loss", "failed", "control"
    ]  # control: a default-action re-run, never submitted
    device_seconds: float = Field(ge=0)  # spent, for the budget
    model_ref: str | None = None  # where the host put model.onnx; None unless it trained
    reason: str = ""


class Awaiting(_Frozen):
    """A confirm-a WIN whose replicate is queued: the original ticket and its verdict."""

    ticket: Ticket
    confirm_a: CoarseVerdict


class Held(_Frozen):
    """A ticket held for a person. ``pending`` is what waits: the coded rule's promote or
    replicate (an escalation, with its confirm-a verdict), or ``audit`` (findings in its sandbox:
    nothing was submitted, so there is no verdict)."""

    ticket: Ticket
    confirm_a: CoarseVerdict | None
    pending: str  # promote | replicate | audit
    findings: int = 0  # the audit findings that held it


class Trained(_Frozen):
    """A ticket trained in the same batch as the current one, waiting to be gated and judged."""

    ticket: Ticket
    outcome: RunOutcome


class Round(_Frozen):
    """One analysis of a best: the round number, the first ticket it ran, the best (no score)."""

    round: int
    first_ticket: int
    incumbent: str  # the best's sha256


class FactoryState(BaseModel):
    """The checkpointed state of one run.

    The append-only lists carry LangGraph's ``operator.add`` reducer: a node returns only the
    items it adds, and the graph appends them, so no node can drop or rewrite what an earlier
    step recorded (history, decisions, rounds, taken approvals, answered escalations).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    started_at: float = 0.0  # set by the first analyse step
    analysis: DevAnalysis | None = None
    queue: list[Ticket] = Field(default_factory=list)
    current: Ticket | None = None
    outcome: RunOutcome | None = None
    verdict: CoarseVerdict | None = None
    awaiting_replicate: dict[str, Awaiting] = Field(default_factory=dict)  # original id -> its WIN
    history: Annotated[list[VerdictEntry], operator.add] = Field(default_factory=list)
    decisions: Annotated[list[JudgeDecision], operator.add] = Field(default_factory=list)
    device_seconds: float = 0.0
    tickets_run: int = 0
    next_id: int = 1
    taken_approvals: Annotated[list[str], operator.add] = Field(default_factory=list)  # approved ids queued
    stop_reason: str = ""
    reanalyse: bool = False  # the best moved: analyse the new best before proposing again
    rounds: Annotated[list[Round], operator.add] = Field(default_factory=list)
    since_dev_win: int = 0  # tickets in a row without a dev win (the plateau rule)
    held: dict[str, Held] = Field(default_factory=dict)  # escalated ticket id -> what waits
    trained: list[Trained] = Field(default_factory=list)  # trained with the current ticket, not yet judged
    answered: Annotated[list[str], operator.add] = Field(default_factory=list)  # escalations acted on

    @classmethod
    def of(cls, values: Mapping[str, object]) -> FactoryState:
        """The state from LangGraph's channel values (``get_state(...).values``, ``invoke``'s result)."""
        return cls.model_validate(dict(values))


class Update(TypedDict, total=False):
    """What a node returns: the fields of :class:`FactoryState` it changes (lists with a reducer:
    the items it adds)."""

    started_at: float
    analysis: DevAnalysis
    queue: list[Ticket]
    current: Ticket | None
    outcome: RunOutcome | None
    verdict: CoarseVerdict | None
    awaiting_replicate: dict[str, Awaiting]
    history: list[VerdictEntry]
    decisions: list[JudgeDecision]
    device_seconds: float
    tickets_run: int
    next_id: int
    taken_approvals: list[str]
    stop_reason: str
    reanalyse: bool
    rounds: list[Round]
    since_dev_win: int
    held: dict[str, Held]
    trained: list[Trained]
    answered: list[str]


CHECKPOINT_TYPES: tuple[type, ...] = (
    FactoryState,
    RunOutcome,
    Awaiting,
    Held,
    Trained,
    Round,
    DevAnalysis,
    VerdictEntry,
    JudgeDecision,
    Decision,
    Ticket,
    Recommendation,
    CoarseVerdict,
    Budget,
    ExpectedEffect,
    Arm,
    TicketKind,
    Tier,
    Verdict,
    Direction,
)


__all__ = [
    "CHECKPOINT_TYPES",
    "Awaiting",
    "FactoryState",
    "Held",
    "Round",
    "RunOutcome",
    "Trained",
    "Update",
]
