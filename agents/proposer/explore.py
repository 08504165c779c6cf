"""Exploration around the incumbent when the analysis has nothing new to try.

``ExploringProposer`` wraps another proposer. When it returns fewer drafts than asked, the rest
come from Optuna's TPE sampler over ``policies/search_space.yaml``, started at the incumbent:
the incumbent's own values are the first observation, and every earlier exploration ticket of
the run is an observation scored from its coarse outcome only (WIN above NO_WIN above DEV_LOSS
above FAILED), since the proposer's context holds no score (trust rule 9). Each draft changes
only the keys where the sample differs from the incumbent and is marked ``exploration:tpe``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agents.actions import dotted_get
from agents.context import ProposerContext, VerdictEntry
from agents.incumbent import EXPLORATION_EVIDENCE
from agents.proposer._base import Proposer, Rejected, TicketDraft
from agents.space import SEARCH_SPACE, SearchSpace, load_space
from segfactory.records import Budget, Direction, ExpectedEffect, TicketKind

log = logging.getLogger(__name__)

EVIDENCE = f"{EXPLORATION_EVIDENCE}:tpe"
# The objective TPE maximises, from the coarse outcome of an exploration ticket.
OUTCOME_VALUE = {
    "WIN": 1.0,
    "NO_WIN": 0.75,
    "DEV_LOSS": 0.25,
    "FAILED": 0.0,
    "INVALID": 0.0,
    "BUDGET_EXHAUSTED": 0.5,
}
INCUMBENT_VALUE = 0.5  # the incumbent itself: better than a dev loss, worse than a dev win
MAX_SAMPLES = 32  # samples drawn per call to find drafts that differ from the incumbent and each other
PREDICTED_GAIN = 0.01  # object F1 an exploration ticket is predicted to gain (the dev rule's order)


class ExploringProposer(Proposer):
    """``inner``'s drafts first; TPE samples around the incumbent fill the rest of the batch."""

    def __init__(
        self, inner: Proposer, default_budget: Budget, *, space: SearchSpace | None = None, seed: int = 0
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.default_budget = default_budget
        self.space = space or load_space(SEARCH_SPACE)
        self.seed = seed

    def propose(
        self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()
    ) -> list[TicketDraft]:
        drafts = self.inner.propose(context, n, rejected)
        if len(drafts) >= n or not context.incumbent:
            return drafts
        refused = {r.draft.model_dump_json() for r in rejected}
        return drafts + self._explore(context, n - len(drafts), refused)

    def _explore(self, context: ProposerContext, n: int, refused: set[str]) -> list[TicketDraft]:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        distributions = self.space.distributions()
        base = {k: v for k in distributions if (v := dotted_get(context.incumbent, k)) is not None}
        study = optuna.create_study(
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=self.seed + len(context.history), n_startup_trials=4),
        )
        self._observe(study, distributions, base, context.history)
        seen = {repr(sorted(h.change.items())) for h in context.history}
        out: list[TicketDraft] = []
        for _ in range(MAX_SAMPLES):
            if len(out) >= n:
                break
            trial = study.ask(distributions)
            change = {k: v for k, v in trial.params.items() if base.get(k) != v}
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # asked, not run: no value
            draft = self._draft(change)
            if change and repr(sorted(change.items())) not in seen and draft.model_dump_json() not in refused:
                seen.add(repr(sorted(change.items())))
                out.append(draft)
        return out

    def _observe(
        self, study: Any, distributions: dict[str, Any], base: dict[str, Any], history: Sequence[VerdictEntry]
    ) -> None:
        import optuna

        def add(params: dict[str, Any], value: float) -> None:
            try:
                study.add_trial(
                    optuna.trial.create_trial(params=params, distributions=distributions, value=value)
                )
            except ValueError as exc:  # a value outside the space (an incumbent moved by another action)
                log.debug("exploration: observation left out: %s", exc)

        if len(base) == len(distributions):
            add(base, INCUMBENT_VALUE)
        for entry in history:
            if entry.verdict not in OUTCOME_VALUE or not entry.change:
                continue
            params = {**base, **{k: v for k, v in entry.change.items() if k in distributions}}
            if len(params) == len(distributions) and set(entry.change) <= set(distributions):
                add(params, OUTCOME_VALUE[str(entry.verdict)])

    def _draft(self, change: dict[str, Any]) -> TicketDraft:
        keys = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(change.items())
        )
        return TicketDraft(
            kind=TicketKind.CONFIG,
            hypothesis=f"exploration (TPE around the incumbent): {keys}",
            change=change,
            budget=self.default_budget,
            expected_effect=ExpectedEffect(
                metric="object_f1", slice="all", direction=Direction.UP, size=PREDICTED_GAIN
            ),
            evidence=[EVIDENCE],
        )


__all__ = ["EVIDENCE", "ExploringProposer"]
