"""The judge: promotion is code; an optional LLM reviewer may reject or escalate, never promote.

Trust rule 7. The judge's input type, :class:`JudgeInput`, holds the ticket's metadata and the
gate's :class:`~segfactory.records.CoarseVerdict` answers and nothing numeric about the model:
no score can be passed in, by construction (``extra="forbid"``, no float fields).

The rule: a WIN on confirm-a asks for a replicate (a new training seed chosen by the host,
scored on confirm-b); a replicate WIN promotes. NO_WIN or INVALID rejects; BUDGET_EXHAUSTED
escalates to a person (rotate the tier).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.llm import KNOWN_PROVIDERS, LLMCaller, LLMFailed, LLMUsage, ToolSpec, UserTurn, make_provider
from agents.prompts import load_prompt
from segfactory.errors import LimitExceeded, UsageError
from segfactory.records import Actor, Arm, CoarseVerdict, Ticket, TicketKind, Verdict, canonical_json
from segfactory.seams import AuditSink

MAX_CHANGE_CHARS = 4000  # the change as canonical JSON; past it: truncated, with `change_truncated`
KNOWN_JUDGES = ("rules", *(f"llm:{p}" for p in KNOWN_PROVIDERS))


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TicketMeta(_Frozen):
    """What the judge may know about a ticket: no budget, no expected-effect size, no score."""

    id: str
    arm: Arm
    kind: TicketKind
    hypothesis: str
    change: str  # canonical JSON of the ticket's change, for reading only
    change_truncated: bool = False

    @classmethod
    def of(cls, ticket: Ticket) -> TicketMeta:
        text = canonical_json(ticket.change).decode()
        return cls(
            id=ticket.id,
            arm=ticket.arm,
            kind=ticket.kind,
            hypothesis=ticket.hypothesis,
            change=text[:MAX_CHANGE_CHARS],
            change_truncated=len(text) > MAX_CHANGE_CHARS,
        )


class JudgeInput(_Frozen):
    """The judge's whole input: ticket metadata and coarse verdicts. No score field, by type."""

    ticket: TicketMeta
    confirm_a: CoarseVerdict
    replicate_id: str | None = None
    confirm_b: CoarseVerdict | None = None  # the replicate's verdict, scored on confirm-b

    @model_validator(mode="after")
    def _consistent(self) -> JudgeInput:
        if self.confirm_a.tier != "confirm-a" or self.confirm_a.ticket_id != self.ticket.id:
            raise ValueError("confirm_a must be the ticket's own confirm-a verdict")
        if self.confirm_b is not None and (
            self.confirm_b.tier != "confirm-b" or self.confirm_b.ticket_id != self.replicate_id
        ):
            raise ValueError("confirm_b must be the replicate's confirm-b verdict (ticket id = replicate_id)")
        return self


class Decision(StrEnum):
    PROMOTE = "promote"
    REPLICATE = "replicate"  # host: train again with a new seed, submit with --replicate-of
    REJECT = "reject"
    ESCALATE = "escalate"


class JudgeDecision(_Frozen):
    ticket_id: str
    decision: Decision
    reason: str
    by: Literal["rule", "llm"]


class Review(_Frozen):
    """The LLM reviewer's structured answer. ``promote`` is not a possible value."""

    decision: Literal["agree", "reject", "escalate"]
    reason: str = Field(min_length=1, max_length=2000)


REVIEW_TOOL = ToolSpec(
    name="review",
    description="Review the coded judge decision for this ticket.",
    parameters=Review.model_json_schema(),
)

_TERMINAL = {
    Verdict.NO_WIN: Decision.REJECT,
    Verdict.INVALID: Decision.REJECT,
    Verdict.BUDGET_EXHAUSTED: Decision.ESCALATE,
}


def rule_decision(judged: JudgeInput) -> JudgeDecision:
    """The promotion rule, as code."""
    a, b = judged.confirm_a.verdict, judged.confirm_b.verdict if judged.confirm_b else None
    tid = judged.ticket.id
    if a is not Verdict.WIN:
        return JudgeDecision(ticket_id=tid, decision=_TERMINAL[a], reason=f"confirm-a: {a.value}", by="rule")
    if b is None:
        return JudgeDecision(
            ticket_id=tid,
            decision=Decision.REPLICATE,
            reason="confirm-a: WIN; a replicate with a host-chosen seed goes to confirm-b",
            by="rule",
        )
    if b is Verdict.WIN:
        return JudgeDecision(
            ticket_id=tid,
            decision=Decision.PROMOTE,
            reason="confirm-a: WIN and replicate confirm-b: WIN",
            by="rule",
        )
    return JudgeDecision(
        ticket_id=tid,
        decision=_TERMINAL[b],
        reason=f"confirm-a: WIN, replicate confirm-b: {b.value}",
        by="rule",
    )


class Judge:
    """Applies the rule; with a ``reviewer`` an LLM may then reject or escalate (never promote).

    The reviewer is asked only about REPLICATE and PROMOTE decisions. If it fails (bounded
    retries spent, or the token budget), the decision is escalated, not promoted.
    """

    def __init__(
        self, sink: AuditSink, *, reviewer: LLMCaller | None = None, run_id: str | None = None
    ) -> None:
        self.sink = sink
        self.reviewer = reviewer
        self.run_id = run_id
        self.system = load_prompt("judge") if reviewer is not None else ""

    def decide(self, judged: JudgeInput) -> JudgeDecision:
        decision = rule_decision(judged)
        if self.reviewer is not None and decision.decision in {Decision.PROMOTE, Decision.REPLICATE}:
            decision = self._review(judged, decision)
        self.sink.append(
            Actor.JUDGE.value,
            "judge_decision",
            {"input": judged.model_dump(mode="json"), "decision": decision.model_dump(mode="json")},
            run_id=self.run_id,
        )
        return decision

    def _review(self, judged: JudgeInput, decision: JudgeDecision) -> JudgeDecision:
        assert self.reviewer is not None
        prompt = json.dumps(
            {"coded_decision": decision.decision.value, "input": judged.model_dump(mode="json")}
        )
        try:
            review = self.reviewer.structured(self.system, UserTurn(text=prompt), REVIEW_TOOL, Review)
        except (LLMFailed, LimitExceeded) as exc:
            return decision.model_copy(
                update={
                    "decision": Decision.ESCALATE,
                    "by": "llm",
                    "reason": f"LLM reviewer failed ({exc}); a person decides",
                }
            )
        if review.decision == "agree":
            return decision
        new = Decision.REJECT if review.decision == "reject" else Decision.ESCALATE
        return JudgeDecision(ticket_id=decision.ticket_id, decision=new, reason=review.reason, by="llm")


def default_judge(proposer: str) -> str:
    """The judge a run gets without ``--judge``: the rules with the rules proposer, else the
    proposer's own provider as the LLM reviewer."""
    return "rules" if proposer == "rules" else f"llm:{proposer}"


def check_judge_spec(spec: str) -> str:
    """``spec`` when it names a known judge; else a ``UsageError`` listing the known ones."""
    provider = spec.removeprefix("llm:")
    if spec == "rules" or (
        spec.startswith("llm:")
        and ":" in provider
        and provider.split(":", 1)[0] in {p.split(":")[0] for p in KNOWN_PROVIDERS}
    ):
        return spec
    raise UsageError(f"judge {spec!r} is not registered; known: {', '.join(KNOWN_JUDGES)}")


def make_reviewer(
    spec: str, *, sink: AuditSink, usage: LLMUsage, run_id: str | None, base_url: str | None = None
) -> LLMCaller | None:
    """The LLM reviewer for ``--judge spec``: None for ``rules``, else an audited caller (actor judge).

    ``llm:<provider spec>`` takes the same provider grammar as ``--proposer`` (``llm:openai:MODEL``,
    ``llm:anthropic:MODEL``, ``llm:local:URL[#MODEL]``). Its tokens count against the run's
    ``usage``. Whatever it answers, :class:`Judge` lets it only agree, reject or escalate.
    """
    if check_judge_spec(spec) == "rules":
        return None
    provider = make_provider(spec.removeprefix("llm:"), sink, Actor.JUDGE, run_id=run_id, base_url=base_url)
    return LLMCaller(provider, sink, usage, Actor.JUDGE, run_id=run_id)
