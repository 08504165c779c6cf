"""Exploration around the incumbent when the analysis has nothing new to try.

``ExploringProposer`` wraps another proposer. When it returns fewer drafts than asked, the rest
come from Optuna's TPE sampler over ``policies/search_space.yaml``, from one study per run that
persists in the run's folder (``runs/<id>/search.db``) and learns from the host-computed dev
object F1 of every ticket the run trained (``observations``: the configs the lineage recorded,
with their dev scores; dev is open, and these numbers go to the sampler only, never into an
LLM's context). Without observations it falls back to the coarse outcomes of the verdict history.

Each draft changes only the keys where the sample differs from the incumbent and names the
incumbent it was drawn around (``exploration:tpe@<sha256[:12]>``). When the incumbent has
trained weights, the first draft of a batch is population-based-training style: it continues
the incumbent's weights (``continues: incumbent``) with only its non-architectural
hyperparameters perturbed, since a new architecture cannot start from another's weights.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, JsonValue

from agents.actions import dotted_get
from agents.context import ProposerContext, VerdictEntry
from agents.incumbent import EXPLORATION_EVIDENCE
from agents.proposer._base import Proposer, Rejected, TicketDraft
from agents.space import SEARCH_SPACE, SearchSpace, coherent, load_space
from segfactory.records import INCUMBENT, Budget, Direction, ExpectedEffect, TicketKind

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

log = logging.getLogger(__name__)

EVIDENCE = f"{EXPLORATION_EVIDENCE}:tpe"
PBT_EVIDENCE = f"{EXPLORATION_EVIDENCE}:pbt"
# The objective TPE maximises without dev scores, from the coarse outcome of a ticket.
OUTCOME_VALUE = {
    "WIN": 1.0,
    "NO_WIN": 0.75,
    "DEV_LOSS": 0.25,
    "FAILED": 0.0,
    "INVALID": 0.0,
    "BUDGET_EXHAUSTED": 0.5,
}
INCUMBENT_VALUE = 0.5  # the incumbent itself, without dev scores: better than a dev loss, worse than a win
MAX_SAMPLES = 32  # samples drawn per call to find drafts that differ from the incumbent and each other
PREDICTED_GAIN = 0.01  # object F1 an exploration ticket is predicted to gain (the dev rule's order)
STARTUP_TRIALS = 4  # TPE samples at random until the study holds this many observations
# Keys whose change alters the network's shape: a draft that continues weights leaves them alone.
ARCHITECTURE_PREFIXES = ("model.", "deep_supervision", "engine")


class Observation(BaseModel):
    """One trained ticket as the study sees it: its values of the space's keys and its dev score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    params: dict[str, JsonValue]  # the space's keys, as the ticket's patched config had them
    value: float  # host-computed dev object F1


class ExploringProposer(Proposer):
    """``inner``'s drafts first; TPE samples around the incumbent fill the rest of the batch.

    ``storage`` is the Optuna storage URL of the run's study (None: in memory, for one call);
    ``observations`` returns the run's trained tickets with their dev scores (host-computed).
    """

    def __init__(
        self,
        inner: Proposer,
        default_budget: Budget,
        *,
        space: SearchSpace | None = None,
        seed: int = 0,
        storage: str | None = None,
        study_name: str = "explore",
        observations: Callable[[], Sequence[Observation]] | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.default_budget = default_budget
        self.space = space or load_space(SEARCH_SPACE)
        self.seed = seed
        self.storage, self.study_name, self.observations = storage, study_name, observations

    def propose(
        self, context: ProposerContext, n: int, rejected: Sequence[Rejected] = ()
    ) -> list[TicketDraft]:
        drafts = self.inner.propose(context, n, rejected)
        if len(drafts) >= n or not context.incumbent:
            return drafts
        refused = {r.draft.model_dump_json() for r in rejected}
        return drafts + self._explore(context, n - len(drafts), refused)

    # -- the study ------------------------------------------------------------------------------
    def _study(
        self, context: ProposerContext, distributions: dict[str, BaseDistribution], base: dict[str, object]
    ) -> Any:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            storage=self.storage,
            study_name=self.study_name,
            load_if_exists=True,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(
                seed=self.seed + len(context.history), n_startup_trials=STARTUP_TRIALS
            ),
        )
        if self.observations is None:
            self._observe_coarse(study, distributions, base, context.history)
        else:
            self._observe(study, distributions, self.observations())
        return study

    def _observe(
        self, study: Any, distributions: dict[str, BaseDistribution], observations: Sequence[Observation]
    ) -> None:
        """Add every trained ticket not yet in the study as a completed trial with its dev score."""
        import optuna

        known = {t.user_attrs.get("ticket_id") for t in study.get_trials(deepcopy=False)}
        for obs in observations:
            if obs.ticket_id in known or set(obs.params) != set(distributions):
                continue
            try:
                trial = optuna.trial.create_trial(
                    params=obs.params,
                    distributions=distributions,
                    value=obs.value,
                    user_attrs={"ticket_id": obs.ticket_id},
                )
            except ValueError as exc:  # a value outside the space (an incumbent moved by another action)
                log.debug("exploration: %s left out of the study: %s", obs.ticket_id, exc)
                continue
            study.add_trial(trial)

    def _observe_coarse(
        self,
        study: Any,
        distributions: dict[str, BaseDistribution],
        base: dict[str, object],
        history: Sequence[VerdictEntry],
    ) -> None:
        """Without dev scores: the incumbent and each earlier exploration by its coarse outcome."""
        import optuna

        def add(params: dict[str, object], value: float) -> None:
            try:
                study.add_trial(
                    optuna.trial.create_trial(params=params, distributions=distributions, value=value)
                )
            except ValueError as exc:
                log.debug("exploration: observation left out: %s", exc)

        if len(base) == len(distributions):
            add(base, INCUMBENT_VALUE)
        for entry in history:
            if entry.verdict not in OUTCOME_VALUE or not entry.change:
                continue
            params = {**base, **{k: v for k, v in entry.change.items() if k in distributions}}
            if len(params) == len(distributions) and set(entry.change) <= set(distributions):
                add(params, OUTCOME_VALUE[str(entry.verdict)])

    # -- the drafts -----------------------------------------------------------------------------
    def _explore(self, context: ProposerContext, n: int, refused: set[str]) -> list[TicketDraft]:
        import optuna

        distributions = self.space.distributions()
        base: dict[str, object] = {
            k: v for k in distributions if (v := dotted_get(context.incumbent, k)) is not None
        }
        study = self._study(context, distributions, base)
        seen = {repr(sorted(h.change.items())) for h in context.history}
        out: list[TicketDraft] = []
        pbt = context.incumbent_has_weights
        for _ in range(MAX_SAMPLES):
            if len(out) >= n:
                break
            trial = study.ask(distributions)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # asked, not run: no value
            change = coherent({k: v for k, v in trial.params.items() if base.get(k) != v})
            if pbt:  # continue the incumbent's weights: its architecture stays
                change = {k: v for k, v in change.items() if not k.startswith(ARCHITECTURE_PREFIXES)}
            draft = self._draft(change, context.incumbent_sha256, continues=pbt)
            key = repr(sorted(change.items())) + (":pbt" if pbt else "")
            if change and key not in seen and draft.model_dump_json() not in refused:
                seen.add(key)
                out.append(draft)
                pbt = False  # one continuation a batch; the rest explore from fresh weights
        return out

    def _draft(self, change: Mapping[str, object], incumbent: str, *, continues: bool) -> TicketDraft:
        keys = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(change.items())
        )
        around = f"@{incumbent[:12]}" if incumbent else ""
        if continues:
            hypothesis = f"exploration (PBT: the incumbent's weights, hyperparameters perturbed): {keys}"
        else:
            hypothesis = f"exploration (TPE around the incumbent): {keys}"
        return TicketDraft(
            kind=TicketKind.CONFIG,
            hypothesis=hypothesis,
            change=change,
            budget=self.default_budget,
            expected_effect=ExpectedEffect(
                metric="object_f1", slice="all", direction=Direction.UP, size=PREDICTED_GAIN
            ),
            evidence=[f"{PBT_EVIDENCE if continues else EVIDENCE}{around}"],
            continues=INCUMBENT if continues else None,
        )


__all__ = ["ARCHITECTURE_PREFIXES", "EVIDENCE", "PBT_EVIDENCE", "ExploringProposer", "Observation"]
