"""The ``rules`` proposer: the analysis report's recommendations, in order, as tickets.

Deterministic: the same context gives the same drafts. A recommendation already tried (same
hypothesis and change in the verdict history) or already rejected is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.context import ProposerContext
from agents.proposer._base import Proposer, Rejected, TicketDraft
from agents.validate import BASE_CONFIG_EVIDENCE
from segfactory.records import Budget, Direction, ExpectedEffect, Recommendation, TicketKind


def draft_from(rec: Recommendation, budget: Budget) -> TicketDraft:
    """A recommendation as a draft; an action that trains longer raises the epoch budget with it,
    and a fine-tune of the incumbent's weights takes its share of the device budget."""
    hypothesis = f"{rec.action}: {rec.rationale}" if rec.rationale else rec.action
    epochs = rec.evidence.get("epochs")
    if isinstance(epochs, int) and epochs > budget.epochs:
        budget = Budget(device_seconds=budget.device_seconds, epochs=epochs)
    share = rec.evidence.get("budget_share")
    if rec.continues and isinstance(share, float) and share < 1:
        budget = Budget(device_seconds=budget.device_seconds * share, epochs=budget.epochs)
    return TicketDraft(
        kind=rec.kind,
        hypothesis=hypothesis,
        change=dict(rec.change),
        budget=budget,
        expected_effect=rec.predicted_effect,
        evidence=[f"recommendation:{rec.id}"],
        continues=rec.continues,
    )


BASE_HYPOTHESIS = "base config: the run's base training config, unchanged, beats the current best"


def base_config_draft(budget: Budget) -> TicketDraft:
    """The first ticket of a rules run: the base config as it is (an empty change)."""
    return TicketDraft(
        kind=TicketKind.CONFIG,
        hypothesis=BASE_HYPOTHESIS,
        change={},
        budget=budget,
        expected_effect=ExpectedEffect(metric="object_f1", slice="all", direction=Direction.UP, size=0.05),
        evidence=[BASE_CONFIG_EVIDENCE],
    )


class RulesProposer(Proposer):
    """No LLM: recommendations become tickets with the profile's default budget.

    With ``base_first`` (what ``segfactory run`` uses), a run's first ticket is the unchanged
    base config: the run first checks that its base training config beats the current best.
    """

    name = "rules"

    def __init__(self, default_budget: Budget, *, base_first: bool = False) -> None:
        self.default_budget = default_budget
        self.base_first = base_first

    def propose(
        self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()
    ) -> list[TicketDraft]:
        tried = {(h.hypothesis, repr(sorted(h.change.items()))) for h in context.history}
        refused = {r.draft.model_dump_json() for r in rejected}
        drafts: list[TicketDraft] = []
        base = base_config_draft(self.default_budget)
        if self.base_first and not context.history and base.model_dump_json() not in refused:
            drafts.append(base)  # a run first checks that the base config beats the current best
            if len(drafts) == n:
                return drafts
        for rec in context.analysis.recommendations:
            draft = draft_from(rec, self.default_budget)
            if (
                draft.hypothesis,
                repr(sorted(draft.change.items())),
            ) in tried or draft.model_dump_json() in refused:
                continue
            drafts.append(draft)
            if len(drafts) == n:
                break
        return drafts
