"""The proposer interface, what it returns, and the registry that picks one by name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.context import ProposerContext
from segfactory.records import Budget, ExpectedEffect, TicketKind

MAX_TICKETS_PER_PROPOSAL = 8  # per call; an LLM asking for more is schema-invalid and corrected


class TicketDraft(BaseModel):
    """A ticket as a proposer writes it: the host owns id, arm, seed and replicate_of."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: TicketKind
    hypothesis: str = Field(min_length=1, max_length=4000)
    # the change as the proposer wrote it (a config patch, files, a data spec), validated with the
    # ticket; ``object`` keeps the tool's JSON schema an open object, as the model is shown it
    change: dict[str, object] = Field(default_factory=dict)
    budget: Budget
    expected_effect: ExpectedEffect
    evidence: list[str] = Field(default_factory=list)
    # "incumbent": start from the current best's trained weights (the host finds its checkpoint);
    # None: fresh weights. Which checkpoint, and its hash, are the host's to plan.
    continues: Literal["incumbent"] | None = None


class ProposalBatch(BaseModel):
    """The structured output of an LLM proposer (the ``propose_tickets`` tool's arguments)."""

    model_config = ConfigDict(extra="forbid")
    tickets: list[TicketDraft] = Field(min_length=1, max_length=MAX_TICKETS_PER_PROPOSAL)


class Rejected(BaseModel):
    """A draft the host refused, with the reasons, shown to the proposer on its next try."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    draft: TicketDraft
    reasons: list[str]


class Proposer(ABC):
    """Turns the allowlisted context into ticket drafts.

    ``propose`` returns between 0 and ``n`` drafts (0: nothing left worth trying). It sees only
    a :class:`ProposerContext` and the host's rejections of its own earlier drafts. LLM-backed
    proposers raise ``agents.llm.LLMFailed`` after their bounded retries and
    ``segfactory.errors.LimitExceeded`` once the run's token budget is spent.
    """

    name: str

    @abstractmethod
    def propose(
        self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()
    ) -> list[TicketDraft]: ...
