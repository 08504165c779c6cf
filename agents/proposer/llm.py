"""LLM proposers (``openai:MODEL``, ``anthropic:MODEL``, ``local:URL``): tickets by tool call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from agents.context import ProposerContext
from agents.llm import LLMCaller, ToolSpec, UserTurn, load_attachments
from agents.prompts import load_prompt
from agents.proposer._base import ProposalBatch, Proposer, Rejected, TicketDraft
from segfactory.records import Budget

PROPOSE_TOOL = ToolSpec(
    name="propose_tickets",
    description="Submit hypothesis tickets for the host to validate and run.",
    parameters=ProposalBatch.model_json_schema(),
)


class LLMProposer(Proposer):
    """Asks the model for a :class:`ProposalBatch` through a forced tool call.

    ``attachments`` (e.g. error-crop PNGs from the dev analysis) are loaded before each request;
    a missing or oversized one raises before anything is sent.
    """

    def __init__(self, caller: LLMCaller, caps: Budget, *, attachments: Sequence[Path] = ()) -> None:
        self.caller = caller
        self.caps = caps
        self.attachments = list(attachments)
        self.system = load_prompt("proposer")
        self.name = caller.provider.name

    def prompt(self, context: ProposerContext, n: int, rejected: Sequence[Rejected]) -> str:
        lines = [
            f"Propose at most {n} ticket(s).",
            f"Per-ticket caps: device_seconds <= {self.caps.device_seconds:g}, epochs <= {self.caps.epochs}.",
            "Context (dev analysis and verdict history):",
            context.model_dump_json(indent=1),
        ]
        if rejected:
            lines.append("Rejected earlier drafts and why (fix these):")
            lines += [
                json.dumps({"draft": r.draft.model_dump(mode="json"), "reasons": r.reasons}) for r in rejected
            ]
        return "\n".join(lines)

    def propose(
        self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()
    ) -> list[TicketDraft]:
        files = load_attachments(self.attachments)
        turn = UserTurn(text=self.prompt(context, n, rejected), attachments=files)
        batch = self.caller.structured(self.system, turn, PROPOSE_TOOL, ProposalBatch)
        return batch.tickets[:n]
