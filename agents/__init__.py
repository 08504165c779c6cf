"""Agents: proposers, the judge, the code-editing agent and their LLM providers.

Public API (see docs/agents.md):

- context: ``DevAnalysis``, ``VerdictEntry``, ``ProposerContext``, ``build_context`` (trust rule 9)
- validation: ``load_budget_policy``, ``ticket_problems`` (policies/budgets.yaml, config allowlist,
  code paths)
- proposers: ``get_proposer(name, ...)`` for ``rules | openai:MODEL | anthropic:MODEL | local:URL[#MODEL]``,
  ``propose_valid`` (validated tickets, bounded re-asks)
- judge: ``Judge``, ``JudgeInput``, ``TicketMeta``, ``Decision``, ``rule_decision`` (trust rule 7)
- code agent: ``CodeAgent``, ``CodeTools``, ``Workspace``, ``sandbox_runner``
- the audit seam: ``AuditSink`` (``audit.AuditLog`` satisfies it)

LLM providers live in ``agents.llm``. Importing this package does not import torch, and the SDKs
are imported only when an LLM provider is built.
"""

from agents.code_agent import AgentOutcome, CodeAgent, CodeTools, CommandResult, sandbox_runner
from agents.context import DevAnalysis, ProposerContext, VerdictEntry, build_context
from agents.judge import Decision, Judge, JudgeDecision, JudgeInput, TicketMeta, rule_decision
from agents.proposer import KNOWN_PROPOSERS, Proposer, TicketDraft, get_proposer, propose_valid
from agents.validate import ticket_problems
from agents.workspace import PathRefused, Workspace
from segfactory.budgets import BudgetPolicy, load_budget_policy
from segfactory.seams import AuditSink

__all__ = [
    "KNOWN_PROPOSERS",
    "AgentOutcome",
    "AuditSink",
    "BudgetPolicy",
    "CodeAgent",
    "CodeTools",
    "CommandResult",
    "Decision",
    "DevAnalysis",
    "Judge",
    "JudgeDecision",
    "JudgeInput",
    "PathRefused",
    "Proposer",
    "ProposerContext",
    "TicketDraft",
    "TicketMeta",
    "VerdictEntry",
    "Workspace",
    "build_context",
    "get_proposer",
    "load_budget_policy",
    "propose_valid",
    "rule_decision",
    "sandbox_runner",
    "ticket_problems",
]
