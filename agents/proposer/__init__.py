"""Proposers: the allowlisted context in, validated hypothesis tickets out.

``get_proposer(name, ...)`` picks ``rules`` or an LLM backend; ``propose_valid`` turns drafts
into validated :class:`segfactory.records.Ticket` objects with bounded re-asks.
"""

from agents.proposer._base import MAX_TICKETS_PER_PROPOSAL, ProposalBatch, Proposer, Rejected, TicketDraft
from agents.proposer._loop import MAX_PROPOSAL_ROUNDS, propose_valid, to_ticket
from agents.proposer._registry import KNOWN_PROPOSERS, get_proposer
from agents.proposer.llm import PROPOSE_TOOL, LLMProposer
from agents.proposer.rules import RulesProposer

__all__ = [
    "KNOWN_PROPOSERS",
    "MAX_PROPOSAL_ROUNDS",
    "MAX_TICKETS_PER_PROPOSAL",
    "PROPOSE_TOOL",
    "LLMProposer",
    "ProposalBatch",
    "Proposer",
    "Rejected",
    "RulesProposer",
    "TicketDraft",
    "get_proposer",
    "propose_valid",
    "to_ticket",
]
