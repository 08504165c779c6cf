"""The ``rules`` proposer: the analysis report's recommendations, in order, as tickets.

Deterministic: the same context gives the same drafts. A recommendation already tried (same
hypothesis and change in the verdict history) or already rejected is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.context import ProposerContext
from agents.proposer._base import Proposer, Rejected, TicketDraft
from segfactory.records import Budget, Recommendation


def draft_from(rec: Recommendation, budget: Budget) -> TicketDraft:
    hypothesis = f"{rec.action}: {rec.rationale}" if rec.rationale else rec.action
    return TicketDraft(kind=rec.kind, hypothesis=hypothesis, change=dict(rec.change), budget=budget,
                       expected_effect=rec.predicted_effect, evidence=[f"recommendation:{rec.id}"])


class RulesProposer(Proposer):
    """No LLM: recommendations become tickets with the profile's default budget."""

    name = "rules"

    def __init__(self, default_budget: Budget) -> None:
        self.default_budget = default_budget

    def propose(self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()) -> list[TicketDraft]:
        tried = {(h.hypothesis, repr(sorted(h.change.items()))) for h in context.history}
        refused = {r.draft.model_dump_json() for r in rejected}
        drafts: list[TicketDraft] = []
        for rec in context.analysis.recommendations:
            draft = draft_from(rec, self.default_budget)
            if (draft.hypothesis, repr(sorted(draft.change.items()))) in tried or draft.model_dump_json() in refused:
                continue
            drafts.append(draft)
            if len(drafts) == n:
                break
        return drafts
