"""Exploration around the incumbent once the analysis has nothing new to try."""

from __future__ import annotations

from pathlib import Path

import yaml

from agents.context import DevAnalysis, VerdictEntry, build_context
from agents.proposer.explore import EVIDENCE, ExploringProposer
from agents.proposer.rules import RulesProposer
from agents.space import load_space
from segfactory.records import Arm, Budget

REPO = Path(__file__).resolve().parents[2]
BUDGET = Budget(device_seconds=60, epochs=4)


def _incumbent() -> dict:  # type: ignore[type-arg]
    from vision.config import parse_config

    return parse_config(yaml.safe_load((REPO / "configs" / "run-demo.yaml").read_text())).model_dump(
        mode="json"
    )


def test_with_nothing_recommended_the_batch_is_filled_with_distinct_changes_of_the_incumbent() -> None:
    proposer = ExploringProposer(RulesProposer(BUDGET), BUDGET, seed=3)
    context = build_context(DevAnalysis(summary="dev"), [], incumbent=_incumbent())
    drafts = proposer.propose(context, 4)
    space = load_space().distributions()
    assert len(drafts) == 4 and all(d.evidence == [EVIDENCE] for d in drafts)
    assert len({repr(sorted(d.change.items())) for d in drafts}) == 4  # no draft twice
    for draft in drafts:
        assert draft.change and set(draft.change) <= set(space)
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
