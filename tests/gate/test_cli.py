"""The gate and attack commands through the real entry point."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gate.attack import run_attack
from tests.gate import models
from tests.gate.conftest import build_home


@pytest.mark.slow
def test_attack_boost_leaks_on_naive_and_not_through_the_gate() -> None:
    result = run_attack(n=4000, k=400, reps=5, seed=0)
    naive, gate = result.evaluators["naive"], result.evaluators["gate"]
    assert naive.leak.estimate >= 0.05
    assert naive.leak.low > 0
    assert gate.leak.low <= 0 <= gate.leak.high


@pytest.mark.slow
def test_attack_cli_prints_one_json_object(cli: Callable[..., object], tmp_path: Path) -> None:
    out = cli(
        "attack", "boost", "--n", "500", "--k", "50", "--reps", "2", "--json", "--home", str(tmp_path / "h")
    )
    data = json.loads(out.stdout)  # type: ignore[attr-defined]
    assert set(data) == {"n", "k", "reps", "seed", "level", "budgets", "evaluators"}  # a contract
    assert set(data["evaluators"]) == {"naive", "gate", "gate-a-only"}
    assert set(data["evaluators"]["gate"]) == {"holdout_loss", "fresh_loss", "leak"}
    assert set(data["evaluators"]["gate"]["leak"]) == {"estimate", "low", "high"}
    bad = cli("attack", "boost", "--k", "0", "--json")
    assert bad.returncode != 0 and "segfactory: error" in bad.stderr  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.bwrap
def test_submit_status_and_milestone_commands(cli: Callable[..., object], tmp_path: Path) -> None:
    home, _ = build_home(tmp_path / "home")
    model = models.save(models.threshold_model(bias=-0.45), tmp_path / "m.onnx")
    sub = cli("gate", "submit", "--home", str(home), "--model", str(model), "--ticket", "c1", "--json")
    assert json.loads(sub.stdout)["verdict"] == "WIN", sub.stderr  # type: ignore[attr-defined]
    status = json.loads(cli("gate", "status", "--home", str(home), "--json").stdout)  # type: ignore[attr-defined]
    assert {t["tier"]: t["spent"] for t in status["tiers"]}["confirm-a"] == 1
    args = (
        "gate",
        "milestone",
        "--home",
        str(home),
        "--name",
        "m1",
        "--run",
        "r1",
        "--tiers",
        "sealed",
        "--json",
    )
    first = cli(*args)
    assert json.loads(first.stdout)["tiers"] == ["sealed"], first.stderr  # type: ignore[attr-defined]
    assert (home / "runs" / "r1" / "people" / "milestones" / "m1.md").is_file()
    again = cli(*args)
    assert again.returncode != 0 and "already used" in again.stderr  # type: ignore[attr-defined]


def test_an_answer_time_from_the_environment_must_be_seconds(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "SEGFACTORY_GATE_ANSWER_TIME": "soon"}
    proc = subprocess.run(
        [sys.executable, "-m", "segfactory", "gate", "serve", "--home", str(tmp_path / "h")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert (
        proc.returncode != 0
        and "SEGFACTORY_GATE_ANSWER_TIME='soon' is not a number of seconds" in proc.stderr
    )
