"""Hit-rate bookkeeping lives under runs/<id>/people/ and compares with the default re-run."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.hitrate import held, mark, outcomes, summary
from segfactory.errors import UsageError
from segfactory.home import Home
from segfactory.records import Direction, ExpectedEffect

DOWN = ExpectedEffect(metric="miss_rate", slice="contrast<0.1", direction=Direction.DOWN, size=0.2)


def test_held_needs_the_predicted_direction_and_half_the_size() -> None:
    assert held(DOWN, -0.15) and not held(DOWN, -0.05) and not held(DOWN, 0.3)
    leave = ExpectedEffect(metric="dice", direction=Direction.NONE, size=0.0)
    assert held(leave, 0.0) and not held(leave, 0.02)


def test_outcomes_and_summary_are_written_for_people_only(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    for k, change in enumerate([-0.2, -0.12, 0.05]):
        mark(
            home,
            "r1",
            arm="recommendation",
            recommendation_id=f"rec-{k}",
            ticket_id=f"t{k}",
            predicted=DOWN,
            observed_change=change,
        )
    for k, change in enumerate([0.0, -0.11]):
        mark(
            home,
            "r1",
            arm="default",
            recommendation_id="reseed",
            ticket_id=f"d{k}",
            predicted=DOWN,
            observed_change=change,
        )
    result = summary(home, "r1")
    assert (result.recommendation.held, result.recommendation.n) == (2, 3)
    assert (result.default.held, result.default.n) == (1, 2)
    assert 0 <= result.recommendation.low < 2 / 3 < result.recommendation.high <= 1
    people = home.people_dir("r1")
    assert sorted(p.name for p in people.iterdir()) == ["hitrate.jsonl", "hitrate_summary.json"]
    assert [p for p in home.root.rglob("*") if p.is_file() and people not in p.parents] == []
    assert len(outcomes(home, "r1")) == 5


def test_a_run_id_cannot_escape_the_people_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        mark(
            Home(tmp_path),
            "../x",
            arm="default",
            recommendation_id="r",
            ticket_id="t",
            predicted=DOWN,
            observed_change=0.0,
        )
