"""The action catalogue and the run policy: a file that does not parse names the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.actions import (
    ACTIONS_POLICY,
    RECOMMEND_POLICY,
    Realised,
    load_catalogue,
    patch_for,
    realise_config,
)
from agents.run_policy import RUN_POLICY, load_run_defaults
from segfactory.errors import PolicyError
from segfactory.records import Direction, ExpectedEffect, Recommendation, TicketKind, canonical_json
from vision.recipes import NNUNET_RECIPE, RECIPES


def test_every_recommendation_rule_has_an_action() -> None:
    catalogue = load_catalogue()
    rules = {r["id"] for r in yaml.safe_load(RECOMMEND_POLICY.read_text())["rules"]}
    assert rules <= set(catalogue.actions)
    assert catalogue.actions["leave-it"].do == "none"


def test_a_rule_without_an_action_is_refused(tmp_path: Path) -> None:
    text = ACTIONS_POLICY.read_text().replace("  curation: {do: curation}\n", "")
    (tmp_path / "actions.yaml").write_text(text)
    with pytest.raises(PolicyError, match=r"no action for the recommendation rule\(s\) \['curation'\]"):
        load_catalogue(tmp_path / "actions.yaml")


def test_a_catalogue_that_does_not_parse_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "actions.yaml"
    bad.write_text("schema_version: 1\nactions:\n  label-fix: {do: label_review\n")
    with pytest.raises(PolicyError, match=rf"{bad}:\d+: not valid YAML"):
        load_catalogue(bad)
    lines = ACTIONS_POLICY.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  regularise:"))
    lines[at + 1] = "    do: tune-it"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyError, match=rf"{bad}:{at + 2}: actions.regularise.do"):
        load_catalogue(bad)


def test_a_plateau_rule_that_does_not_parse_names_the_file_and_line(tmp_path: Path) -> None:
    lines = RUN_POLICY.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "tickets_without_dev_win" in line)
    lines[at] = "      tickets_without_dev_win: many"
    bad = tmp_path / "run.yaml"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyError, match=rf"{bad}:{at + 1}: profiles.demo.plateau.tickets_without_dev_win"):
        load_run_defaults("demo", bad)
    assert load_run_defaults("demo").plateau.tickets_without_dev_win > 0


def test_the_nnunet_recipe_is_a_catalogue_option_that_patches_only_what_it_changes() -> None:
    entry = load_catalogue().actions["model-capacity"]
    option = next(o for o in entry.options if o.get("recipe") == NNUNET_RECIPE)
    base = yaml.safe_load((ACTIONS_POLICY.parents[1] / "configs" / "run-demo.yaml").read_text())
    rec = Recommendation(
        id="model-capacity-0",
        evidence={},
        action="model-capacity",
        kind=TicketKind.CONFIG,
        predicted_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.02),
    )
    patch = patch_for(option, base, rec)
    recipe = RECIPES[NNUNET_RECIPE]
    assert patch["optim"] == recipe["optim"] and patch["model"] == recipe["model"]  # SGD, full width
    assert "deep_supervision" not in patch and "loss" not in patch  # the demo base has them already
    # every other earlier option tried on this incumbent: the recipe is what the action runs
    tried = {canonical_json(patch_for(o, base, rec)).decode() for o in entry.options if o is not option}
    got = realise_config("model-capacity", entry, rec, base, tried, max_epochs=10)
    assert isinstance(got, Realised) and got.change == patch


def test_a_catalogue_naming_an_unknown_recipe_is_refused(tmp_path: Path) -> None:
    text = ACTIONS_POLICY.read_text().replace("{recipe: nnunet-recipe}", "{recipe: nnunet-3d}")
    (tmp_path / "actions.yaml").write_text(text)
    with pytest.raises(PolicyError, match=r"names the recipe 'nnunet-3d'; known: nnunet-recipe"):
        load_catalogue(tmp_path / "actions.yaml")
