"""``compare --arms agent-code``: the agent run with the code-editing agent, refused without an LLM."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import CliResult


def test_agent_code_is_a_known_arm_that_needs_an_llm_proposer(
    cli: Callable[..., CliResult], tmp_home: Path
) -> None:
    result = cli("compare", "--arms", "agent,agent-code", "--proposer", "rules", "--home", str(tmp_home))
    assert result.returncode != 0 and "--arms agent-code needs an LLM --proposer" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not tmp_home.exists()
    unknown = cli("compare", "--arms", "agent-cod", "--home", str(tmp_home))
    assert "known: agent, agent-code, sweep-tpe" in unknown.stderr


def test_the_agent_code_arm_is_a_run_with_the_code_agent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from controls import compare

    asked: list[Any] = []
    monkeypatch.setattr(
        compare, "start_run", lambda req: asked.append(req) or SimpleNamespace(run_id="r-none")
    )
    for arm in ("agent", "agent-code"):
        compare._run_arm(tmp_path / "home", arm, 0, 60.0, "openai:gpt-4o", "demo", "bwrap", lambda line: None)
    assert [(r.proposer, r.code_agent, r.budget_s) for r in asked] == [
        ("openai:gpt-4o", False, 60.0),
        ("openai:gpt-4o", True, 60.0),
    ]
    # both stop by the sweeps' rule: only the budget (device time, the profile's compare_arm caps)
    assert [(r.fill_budget, r.wall_s) for r in asked] == [(True, None), (True, None)]


def test_an_agent_arm_budget_above_the_run_cap_is_refused_before_anything(
    cli: Callable[..., CliResult], tmp_home: Path
) -> None:
    result = cli("compare", "--arms", "agent,nnunet", "--budget", "40m", "--home", str(tmp_home))
    assert result.returncode != 0 and "above the demo compare_arm cap 1800" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not tmp_home.exists()
    sweeps = cli("compare", "--arms", "sweep-tpe", "--budget", "40m", "--seeds", "0", "--home", str(tmp_home))
    assert "--seeds 0" in sweeps.stderr  # without an agent arm the run cap does not apply


def test_an_agent_arm_has_the_compare_arm_caps_not_a_persons_run_defaults() -> None:
    from agents.run import RunRequest, run_caps
    from agents.run_policy import load_run_defaults
    from segfactory.errors import UsageError
    from segfactory.home import Home

    defaults, home = load_run_defaults("demo"), Home(Path("/nonexistent"))
    arm = run_caps(RunRequest(home=home, profile="demo", budget_s=1500, fill_budget=True), defaults)
    assert (arm.device_seconds, arm.wall_seconds, arm.tickets) == (1500, 5400, 60)  # a 25-minute arm fits
    with pytest.raises(UsageError, match="above the demo run cap 900"):  # a person's run keeps its caps
        run_caps(RunRequest(home=home, profile="demo", budget_s=1500), defaults)
    run = run_caps(RunRequest(home=home, profile="demo"), defaults)
    assert (run.device_seconds, run.wall_seconds, run.tickets) == (720, 840, 24)  # run.yaml's defaults
