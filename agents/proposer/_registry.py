"""Pick a proposer by name: ``rules``, ``openai:MODEL``, ``anthropic:MODEL``, ``local:URL[#MODEL]``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agents.llm import KNOWN_PROVIDERS, LLMCaller, LLMUsage, make_provider
from agents.llm._call import BACKOFF_BASE_S
from agents.llm._provider import REQUEST_TIMEOUT_S
from agents.proposer._base import Proposer
from agents.proposer.llm import LLMProposer
from agents.proposer.rules import RulesProposer
from segfactory.errors import UsageError
from segfactory.records import Actor, Budget
from segfactory.seams import AuditSink

KNOWN_PROPOSERS = ("rules", *KNOWN_PROVIDERS)


def get_proposer(
    name: str,
    *,
    sink: AuditSink,
    usage: LLMUsage,
    default_budget: Budget,
    caps: Budget,
    run_id: str | None = None,
    base_url: str | None = None,
    attachments: Sequence[Path] = (),
    backoff_base_s: float = BACKOFF_BASE_S,
    timeout_s: float = REQUEST_TIMEOUT_S,
    base_first: bool = False,
) -> Proposer:
    """The proposer named ``name``; an unknown name is a ``UsageError`` listing the known ones.

    ``default_budget`` is what the rules proposer asks per ticket; ``caps`` are the per-ticket
    caps an LLM proposer is told. ``base_url`` overrides the vendor endpoint (tests).
    ``base_first`` makes the rules proposer open a run with the unchanged base config.
    """
    if name == "rules":
        return RulesProposer(default_budget, base_first=base_first)
    if name.split(":", 1)[0] not in {p.split(":")[0] for p in KNOWN_PROVIDERS} or ":" not in name:
        raise UsageError(f"proposer {name!r} is not registered; known: {', '.join(KNOWN_PROPOSERS)}")
    provider = make_provider(
        name, sink, Actor.PROPOSER, run_id=run_id, base_url=base_url, timeout_s=timeout_s
    )
    caller = LLMCaller(provider, sink, usage, Actor.PROPOSER, run_id=run_id, backoff_base_s=backoff_base_s)
    return LLMProposer(caller, caps, attachments=attachments)
