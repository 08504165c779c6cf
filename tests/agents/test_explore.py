"""Exploration around the incumbent once the analysis has nothing new to try."""

from __future__ import annotations

from pathlib import Path

import yaml

from agents.actions import dotted_get
from agents.context import DevAnalysis, ProposerContext, VerdictEntry, build_context
from agents.proposer.explore import ARCHITECTURE_PREFIXES, EVIDENCE, ExploringProposer, Observation
from agents.proposer.rules import RulesProposer
from agents.space import PLAIN_ONLY, CategoricalParam, SearchSpace, load_space
from segfactory.records import Arm, Budget

REPO = Path(__file__).resolve().parents[2]
BUDGET = Budget(device_seconds=60, epochs=4)


def _incumbent() -> dict:  # type: ignore[type-arg]
    from vision.config import parse_config

    return parse_config(yaml.safe_load((REPO / "configs" / "run-demo.yaml").read_text())).model_dump(
        mode="json"
    )


def _context() -> ProposerContext:
    return build_context(DevAnalysis(summary="dev"), [], incumbent=_incumbent())


def test_with_nothing_recommended_the_batch_is_filled_with_distinct_changes_of_the_incumbent() -> None:
    proposer = ExploringProposer(RulesProposer(BUDGET), BUDGET, seed=3)
    context = build_context(DevAnalysis(summary="dev"), [], incumbent=_incumbent())
    drafts = proposer.propose(context, 4)
    space = load_space().distributions()
    assert len(drafts) == 4 and all(d.evidence == [EVIDENCE] for d in drafts)  # no incumbent named: no @
    assert len({repr(sorted(d.change.items())) for d in drafts}) == 4  # no draft twice
    for draft in drafts:
        assert draft.change and set(draft.change) <= set(space) | set(PLAIN_ONLY)
        incumbent = _incumbent()
        for key, value in draft.change.items():  # every key really moves away from the incumbent
            node = incumbent
            for part in key.split("."):
                node = node[part]
            assert node != value


def test_tried_changes_are_not_proposed_again_and_no_incumbent_means_no_exploration() -> None:
    proposer = ExploringProposer(RulesProposer(BUDGET), BUDGET, seed=3)
    first = proposer.propose(build_context(DevAnalysis(summary="dev"), [], incumbent=_incumbent()), 2)
    history = [
        VerdictEntry(
            ticket_id=f"t{k}",
            arm=Arm.AGENT,
            hypothesis=d.hypothesis,
            change=d.change,
            tier=None,
            verdict="DEV_LOSS",
        )
        for k, d in enumerate(first)
    ]
    again = proposer.propose(build_context(DevAnalysis(summary="dev"), history, incumbent=_incumbent()), 4)
    tried = {repr(sorted(d.change.items())) for d in first}
    assert again and not tried & {repr(sorted(d.change.items())) for d in again}
    assert proposer.propose(build_context(DevAnalysis(summary="dev"), []), 4) == []


def test_one_study_per_run_persists_and_learns_from_the_dev_scores_it_is_given(tmp_path: Path) -> None:
    """Two proposer instances over the same storage (a run resumed) share one study, which holds
    each trained ticket once, with its host-computed dev score as the trial's value."""
    space = load_space()
    base = _context().incumbent
    params = {k: dotted_get(base, k) for k in space.params}
    seen = [Observation(ticket_id="r1-t001", params=params, value=0.41)]
    storage = f"sqlite:///{tmp_path / 'search.db'}"

    def proposer() -> ExploringProposer:
        return ExploringProposer(
            RulesProposer(BUDGET), BUDGET, seed=3, storage=storage, study_name="r1", observations=lambda: seen
        )

    assert len(proposer().propose(_context(), 2)) == 2
    seen.append(Observation(ticket_id="r1-t002", params={**params, "optim.lr": 0.001}, value=0.55))
    proposer().propose(_context(), 2)
    import optuna

    study = optuna.load_study(storage=storage, study_name="r1")
    done = {t.user_attrs["ticket_id"]: t.value for t in study.trials if t.state.name == "COMPLETE"}
    assert done == {"r1-t001": 0.41, "r1-t002": 0.55}  # each ticket once, valued by its dev score


def test_with_trained_weights_the_first_draft_continues_them_and_keeps_the_architecture() -> None:
    context = _context().model_copy(update={"incumbent_has_weights": True, "incumbent_sha256": "ab" * 32})
    drafts = ExploringProposer(RulesProposer(BUDGET), BUDGET, seed=5).propose(context, 3)
    pbt, *rest = drafts
    assert pbt.continues == "incumbent" and pbt.evidence == [f"exploration:pbt@{'ab' * 6}"]
    assert pbt.change and not any(k.startswith(ARCHITECTURE_PREFIXES) for k in pbt.change)
    assert all(d.continues is None and d.evidence == [f"exploration:tpe@{'ab' * 6}"] for d in rest)


def test_a_draw_of_another_model_turns_off_what_only_unet_plain_has() -> None:
    import optuna

    from agents.validate import config_problems
    from segfactory.budgets import load_budget_policy

    space = load_space()
    base = _incumbent()  # the demo base: unet-plain with deep supervision
    for name in ("unet-mobilenetv3", "unet-plain"):
        trial = optuna.trial.FixedTrial(
            {key: (name if key == "model.name" else _first(space, key)) for key in space.params}
        )
        patch = space.suggest(trial)
        assert patch.get("deep_supervision") is (False if name != "unet-plain" else None)
        assert config_problems(patch, load_budget_policy(), base) == [], name  # a config that can train
    drafts = ExploringProposer(RulesProposer(BUDGET), BUDGET, seed=5).propose(
        build_context(DevAnalysis(summary="dev"), [], incumbent=base), 12
    )
    assert any(d.change.get("model.name") == "unet-mobilenetv3" for d in drafts)  # the case is drawn
    assert [config_problems(d.change, load_budget_policy(), base) for d in drafts] == [[]] * len(drafts)


def _first(space: SearchSpace, key: str) -> object:
    p = space.params[key]
    return p.choices[0] if isinstance(p, CategoricalParam) else p.low
