"""The sweep over a real Optuna SQLite study with a scripted runner: seeding, accounting, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.judge import Judge
from agents.space import load_space
from controls.sweep import check_sweep, run_sweep, storage_url
from segfactory.errors import DataError, PolicyError, UsageError
from segfactory.records import Arm, Budget, Ticket
from tests.controls._fakes import FakeServices, ListSink

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "configs" / "run-demo.yaml").read_text())
TICKET = Budget(device_seconds=60, epochs=2)


def plan(tmp_path: Path, sampler: str = "tpe", budget_s: float = 200.0, seed: int = 0) -> Any:
    return check_sweep(sampler, budget_s, seed, storage_url(tmp_path, None), load_space(), BASE, TICKET)


def by_lr(ticket: Ticket) -> float:
    return 0.5 + ticket.change["optim.lr"]  # a larger lr scores better on this scripted dev set


def test_the_first_trial_is_the_default_config_and_the_budget_is_spent(tmp_path: Path) -> None:
    services = FakeServices(score_of=by_lr, best=0.9)  # nothing beats the best: no queries
    people = tmp_path / "people"
    result = run_sweep(
        plan(tmp_path), services, Judge(ListSink()), run_id="sw1", make_seed=lambda: 3, people=people
    )
    first = services.tickets[0]
    assert first.arm is Arm.SWEEP_TPE and first.id == "sw1-t000"
    # trial 0 is the base config itself (configs/run-demo.yaml), read over the search space's keys
    assert first.change == {
        "optim.lr": 0.003,
        "optim.weight_decay": 0.0001,
        "batch_size": 16,
        "model.decoder_width": 16,
        "augment.p": 0.5,
        "sampling.rare_oversample": 1.0,
        "model.name": "unet-plain",
        "schedule.name": "cosine",
    }
    assert len(result.trials) == 4 and result.device_seconds == 200.0  # 4 x 50 s: stops once >= 200
    assert services.queries == {"confirm-a": [], "confirm-b": []}
    rows = [json.loads(line) for line in (people / "sweep.jsonl").read_text().splitlines()]
    assert [r["cumulative_device_seconds"] for r in rows] == [50.0, 100.0, 150.0, 200.0]
    assert result.summary().best_dev_score == max(r["dev_score"] for r in rows)


def test_the_study_is_stored_in_the_home_and_seeded(tmp_path: Path) -> None:
    import optuna

    for name, home in (("a", tmp_path / "a"), ("b", tmp_path / "b")):
        home.mkdir()
        run_sweep(
            plan(home, "random", seed=5),
            FakeServices(score_of=by_lr, best=0.9),
            Judge(ListSink()),
            run_id=name,
            make_seed=lambda: 3,
        )
    studies = [
        optuna.load_study(study_name=f"{n}-sweep-random", storage=storage_url(tmp_path / n, None))
        for n in ("a", "b")
    ]
    assert [t.params for t in studies[0].trials] == [
        t.params for t in studies[1].trials
    ]  # same seed, same trials
    assert len({json.dumps(t.params, sort_keys=True) for t in studies[0].trials}) == 4


def test_only_dev_wins_query_and_a_failed_trial_is_recorded(tmp_path: Path) -> None:
    scores = iter([None, 0.6, 0.6, 0.4, 0.4, 0.4])  # trial 0 fails; trial 1 wins and its replicate wins
    services = FakeServices(score_of=lambda t: next(scores), best=0.5)
    result = run_sweep(plan(tmp_path), services, Judge(ListSink()), run_id="sw2", make_seed=lambda: 3)
    summary = result.summary()
    assert summary.failed == 1 and summary.dev_wins == 1 and summary.promoted == 1
    assert services.queries == {"confirm-a": ["sw2-t001"], "confirm-b": ["sw2-t001-rep"]}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"sampler": "grid"}, UsageError, "known: random, tpe"),
        ({"budget_s": 30.0}, UsageError, "too small for one trial"),
    ],
)
def test_bad_sweep_input_is_refused(
    tmp_path: Path, kwargs: dict[str, str | float], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        plan(tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ("params: {optim.lr: {type: float, low: 0.1, high: 0.01}}", "low 0.1 must be below high"),
        ("params: {optim.lr: {type: float, low: 0, high: 0.1, log: true}}", "log range needs low > 0"),
        ("params: {optim.lr: {type: normal, mu: 1}}", "params.optim.lr"),
        ("params: {}", "params"),
        ("params: [", "not valid YAML"),
    ],
)
def test_an_invalid_search_space_is_a_clear_error(tmp_path: Path, space: str, message: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(space)
    with pytest.raises(PolicyError, match=message):
        load_space(path)


def test_a_default_outside_the_space_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text("params: {optim.lr: {type: float, low: 0.0001, high: 0.001}}")
    with pytest.raises(PolicyError, match="outside the search space"):
        check_sweep("tpe", 200, 0, storage_url(tmp_path, None), load_space(path), BASE, TICKET)


def test_a_corrupted_optuna_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "optuna.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    with pytest.raises(DataError, match="corrupted|integrity"):
        plan(tmp_path)
    db.write_bytes(b"not a database at all")
    with pytest.raises(DataError, match="not an SQLite file"):
        plan(tmp_path)
    assert db.read_bytes() == b"not a database at all"
