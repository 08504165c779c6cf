"""Data tickets train on the data they name, or fail with the reason: never on unchanged data."""

from __future__ import annotations

import pytest

from agents._data_tickets import topup_spec
from segfactory.errors import UsageError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from synthetic.slices import generator_constraint


def _ticket(kind: TicketKind, change: dict[str, object]) -> Ticket:
    return Ticket(
        id="t1",
        arm=Arm.AGENT,
        kind=kind,
        hypothesis="h",
        change=change,
        budget=Budget(device_seconds=60, epochs=2),
        expected_effect=ExpectedEffect(metric="miss_rate", direction=Direction.DOWN, size=0.1),
        seed=1,
    )


@pytest.mark.parametrize(
    "slice_name,expected",
    [
        ("contrast<0.124", "low-contrast"),
        ("contrast<0.124 & background=texture", "low-contrast+background:texture"),
        ("diameter<3", "tiny"),
        ("shape=shrinkage", "thin"),
    ],
)
def test_analysis_slices_map_to_generator_constraints(slice_name: str, expected: str) -> None:
    assert generator_constraint(slice_name) == expected


def test_a_slice_the_generator_cannot_target_is_refused_with_the_reason() -> None:
    with pytest.raises(UsageError, match="cannot target the slice term 'shape=cluster'"):
        generator_constraint("shape=cluster & background=texture")


def test_only_data_tickets_with_a_slice_are_top_ups() -> None:
    spec = {"slice": "contrast<0.1", "n": 100}
    assert topup_spec(_ticket(TicketKind.DATA, {"synthetic": spec})) == spec
    assert topup_spec(_ticket(TicketKind.CONFIG, {"synthetic": spec})) is None
    assert topup_spec(_ticket(TicketKind.DATA, {"action": "x"})) is None


def test_a_run_opens_with_the_unchanged_base_config_and_it_passes_validation() -> None:
    from agents.context import DevAnalysis, VerdictEntry, build_context
    from agents.proposer import to_ticket
    from agents.proposer.rules import RulesProposer
    from agents.validate import ticket_problems
    from segfactory.budgets import load_budget_policy
    from tests.agents.conftest import recommendation

    analysis = DevAnalysis(summary="s", recommendations=(recommendation("r1", "optim.lr", 0.001),))
    rules = RulesProposer(Budget(device_seconds=60, epochs=2), base_first=True)
    first = rules.propose(build_context(analysis, []), 5)
    assert [d.change for d in first] == [{}, {"optim.lr": 0.001}]
    base = to_ticket(first[0], "t1", 1)
    assert ticket_problems(base, load_budget_policy(), "demo") == []
    later = rules.propose(build_context(analysis, [VerdictEntry.not_submitted(base, "DEV_LOSS")]), 5)
    assert [d.change for d in later] == [{"optim.lr": 0.001}]  # only once per run
    assert [
        d.change
        for d in RulesProposer(Budget(device_seconds=60, epochs=2)).propose(build_context(analysis, []), 5)
    ] == [{"optim.lr": 0.001}]
