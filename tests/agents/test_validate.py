"""Ticket validation against policies/budgets.yaml, the config allowlist and protected paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import JsonValue

from agents.validate import ticket_problems
from segfactory.budgets import BUDGETS_POLICY, load_budget_policy
from segfactory.errors import PolicyError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind


def _ticket(
    kind: TicketKind = TicketKind.CONFIG,
    change: dict[str, JsonValue] | None = None,
    device_seconds: float = 60,
    epochs: int = 2,
) -> Ticket:
    return Ticket(
        id="t1",
        arm=Arm.AGENT,
        kind=kind,
        hypothesis="h",
        seed=1,
        change={"optim.lr": 0.001} if change is None else change,
        budget=Budget(device_seconds=device_seconds, epochs=epochs),
        expected_effect=ExpectedEffect(metric="iou", direction=Direction.UP, size=0.01),
    )


def test_policy_loads_and_has_both_profiles() -> None:
    policy = load_budget_policy()
    assert {"demo", "default"} <= set(policy.profiles)
    demo = policy.for_profile("demo")
    assert demo.run.wall_seconds <= 900 and demo.run.llm_tokens > 0
    with pytest.raises(PolicyError, match="known: default, demo"):
        policy.for_profile("huge")


def test_invalid_policy_file_is_a_policy_error(tmp_path: Path) -> None:
    bad = tmp_path / "budgets.yaml"
    bad.write_text(BUDGETS_POLICY.read_text().replace("max_epochs: 40", "max_epochs: -1"))
    with pytest.raises(PolicyError, match="invalid budget policy"):
        load_budget_policy(bad)


def test_a_ticket_within_caps_is_valid() -> None:
    assert ticket_problems(_ticket(), load_budget_policy(), "demo") == []


def test_over_budget_tickets_are_refused_with_reasons() -> None:
    policy = load_budget_policy()
    caps = policy.for_profile("demo").ticket
    problems = ticket_problems(
        _ticket(device_seconds=caps.max_device_seconds + 1, epochs=caps.max_epochs + 1), policy, "demo"
    )
    assert len(problems) == 2 and "per-ticket cap" in problems[0]
    left = ticket_problems(_ticket(device_seconds=50), policy, "demo", device_seconds_left=30)
    assert left and "left in this run" in left[0]


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"eval_split": "confirm-a"}, "not changeable"),
        ({"seed": 7}, "not changeable"),  # host-owned
        ({"validation": {"fraction": 0.0}}, "not changeable"),  # the carve the kept epoch is chosen on
        ({}, "at least one key"),
        ({"optim": {"lr": -1.0}}, "invalid"),  # re-validated by vision's TrainConfig
        ({"optim.nesterov": True}, "invalid"),
    ],
)
def test_config_changes_outside_the_allowlist_are_refused(
    change: dict[str, JsonValue], fragment: str
) -> None:
    problems = ticket_problems(_ticket(change=change), load_budget_policy(), "demo")
    assert problems and fragment in problems[0]


def test_nested_and_dotted_config_changes_are_accepted() -> None:
    policy = load_budget_policy()
    assert ticket_problems(_ticket(change={"optim": {"lr": 0.01}, "augment.p": 0.3}), policy, "demo") == []


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("code/model.py", None),
        ("code/sub/aug.py", None),
        ("gate/scorer.py", "outside"),
        ("../code/x.py", "without '..'"),
        ("/etc/passwd", "without '..'"),
        ("code/vault/seeds.json", "protected"),
        ("code", "outside"),
    ],
)
def test_code_paths_stay_in_the_code_copy(name: str, fragment: str | None) -> None:
    problems = ticket_problems(
        _ticket(TicketKind.CODE, {"files": {name: "x = 1\n"}}), load_budget_policy(), "demo"
    )
    if fragment is None:
        assert problems == []
    else:
        assert problems and fragment in problems[0]


def test_a_code_ticket_must_name_files() -> None:
    assert ticket_problems(_ticket(TicketKind.CODE, {"describe": "refactor"}), load_budget_policy(), "demo")


def test_a_data_ticket_for_a_slice_the_generator_cannot_draw_is_refused() -> None:
    policy = load_budget_policy()

    def data(slice_name: str) -> Ticket:
        return _ticket(
            TicketKind.DATA,
            {"action": "targeted_synthetic", "synthetic": {"slice": slice_name, "images": 250}},
        )

    problems = ticket_problems(data("shape=cluster & background=texture"), policy, "demo")
    assert len(problems) == 1 and "cannot target the slice term 'shape=cluster'" in problems[0]
    assert ticket_problems(data("contrast<0.124 & background=texture"), policy, "demo") == []
    assert ticket_problems(_ticket(TicketKind.DATA, {"action": "data_request"}), policy, "demo") == []
