"""The comparison's plain verdict, its yield and the best-so-far plot."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from agents.llm import LLMUsage
from controls.compare import _curve
from controls.compare_report import ArmRun, SealedScores, summarise, write_plot


def run(
    sealed: float,
    curve: list[tuple[float, float | None]],
    promoted: int = 0,
    llm: LLMUsage | None = None,
) -> ArmRun:
    return ArmRun(
        curve=_curve(curve),
        promoted=promoted,
        llm=llm or LLMUsage(),
        sealed=SealedScores(object_f1={"estimate": sealed, "low": sealed - 0.02, "high": sealed + 0.02}),
    )


def results(agent: float, sweep: float) -> dict[str, list[ArmRun]]:
    return {
        "agent": [
            run(
                agent,
                [(60, 0.5), (60, 0.55)],
                1,
                LLMUsage(input_tokens=900, output_tokens=100, latency_s=4.0),
            )
        ]
        * 3,
        "sweep-tpe": [run(sweep, [(60, 0.52), (60, 0.51)])] * 3,
    }


def test_best_so_far_is_cumulative_and_failures_spend_seconds() -> None:
    assert _curve([(60, 0.5), (50, 0.4), (70, 0.6)]) == [(60, 0.5), (110, 0.5), (180, 0.6)]
    assert _curve([(30, None), (60, 0.5), (20, None)]) == [(90, 0.5), (110, 0.5)]


def test_the_report_says_plainly_when_the_sweep_ties_or_wins() -> None:
    assert (
        summarise(results(0.60, 0.60), proposer="rules", budget_s=120, seeds=3)
        .as_json()["verdict"]
        .startswith("The sweep ties")
    )
    wins = summarise(results(0.55, 0.60), proposer="openai:gpt", budget_s=120, seeds=3).as_json()
    assert wins["verdict"].startswith("The sweep wins") and "rules proposer" not in wins["verdict"]
    agent = summarise(results(0.65, 0.60), proposer="rules", budget_s=120, seeds=3).as_json()
    assert agent["verdict"].startswith("The agent arm wins")
    assert "No LLM was configured: the agent arm was the rules proposer." in agent["verdict"]


def test_yield_and_llm_cost_are_kept_apart_from_device_time() -> None:
    arms = summarise(results(0.6, 0.6), proposer="rules", budget_s=120, seeds=3).as_json()["arms"]
    y = arms["agent"]["yield"]
    assert y["device_seconds"] == 360 and y["promoted"] == 3 and y["promoted_per_device_hour"] == 30
    assert y["llm_tokens"] == 3000 and y["llm_tokens_per_promoted_win"] == 1000 and y["llm_seconds"] == 12
    assert arms["sweep-tpe"]["yield"]["llm_tokens"] == 0


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    path = write_plot(results(0.6, 0.6), tmp_path / "people" / "best_so_far.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 300


def test_arm_curves_are_read_from_the_people_files(tmp_path: Path) -> None:
    import json

    from controls.compare import _agent_arm, _sweep_arm
    from segfactory.home import Home

    home = Home(tmp_path / "home")
    sweep_people = home.people_dir("sw")
    sweep_people.mkdir(parents=True)
    trials = [
        {
            "ticket_id": "sw-t000",
            "dev_score": 0.4,
            "device_seconds": 60.0,
            "status": "dev_loss",
            "confirm_a": None,
            "decision": None,
        },
        {
            "ticket_id": "sw-t001",
            "dev_score": None,
            "device_seconds": 30.0,
            "status": "failed",
            "confirm_a": None,
            "decision": None,
        },
        {
            "ticket_id": "sw-t002",
            "dev_score": 0.6,
            "device_seconds": 120.0,
            "status": "dev_win",
            "confirm_a": "WIN",
            "decision": "promote",
        },
    ]
    (sweep_people / "sweep.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trials))
    arm = _sweep_arm(home, "sw")
    assert arm.curve == [(60.0, 0.4), (90.0, 0.4), (210.0, 0.6)] and arm.best_ticket == "sw-t002"
    assert (arm.dev_wins, arm.confirm_a_wins, arm.promoted) == (1, 1, 1)
    agent_people = home.people_dir("r1")
    agent_people.mkdir(parents=True)
    (agent_people / "dev_comparisons.jsonl").write_text(
        json.dumps({"ticket_id": "r1-t001", "object_f1": 0.3}) + "\n"
    )
    (home.tickets_dir("r1") / "r1-t001").mkdir(parents=True)
    (home.tickets_dir("r1") / "r1-t001" / "outcome.json").write_text(json.dumps({"device_seconds": 80.0}))
    (home.runs / "r1" / "llm_usage.json").write_text(json.dumps({"input_tokens": 5, "output_tokens": 1}))
    agent = _agent_arm(home, "r1")
    assert agent.curve == [(80.0, 0.3)] and agent.llm.input_tokens == 5 and agent.promoted == 0


def test_seed_spread_decides_not_the_mean_alone() -> None:
    """The 3-seed compare measured here: means 0.466 vs 0.472, seeds swinging ±0.06 either way."""
    measured = {
        "agent": [run(s, [(60, 0.5)]) for s in (0.4896, 0.4301, 0.4777)],
        "sweep-random": [run(s, [(60, 0.5)]) for s in (0.4329, 0.4869, 0.4950)],
    }
    summary = summarise(measured, proposer="rules", budget_s=240, seeds=3).as_json()
    diff = summary["sweep_minus_agent"]
    assert diff["arm"] == "sweep-random" and len(diff["per_seed"]) == 3
    assert diff["low"] < 0 < diff["high"] and abs(diff["mean"] - 0.00577) < 1e-4
    assert summary["verdict"].startswith("The sweep ties") and "90% interval" in summary["verdict"]


def test_one_seed_is_never_called_a_resolved_difference() -> None:
    one = {"agent": [run(0.55, [(60, 0.5)])], "sweep-tpe": [run(0.60, [(60, 0.5)])]}
    summary = summarise(one, proposer="rules", budget_s=240, seeds=1).as_json()
    assert summary["sweep_minus_agent"]["low"] is None
    assert (
        summary["verdict"].startswith("The sweep wins") and "not a resolved difference" in summary["verdict"]
    )


def test_the_tiers_redrawn_for_each_arm_run_are_reported() -> None:
    measured = results(0.6, 0.6)
    measured["sweep-tpe"] = [
        r.model_copy(update={"fresh_tiers": {"confirm-a": 2 + k}})
        for k, r in enumerate(measured["sweep-tpe"])
    ]
    arms = summarise(measured, proposer="rules", budget_s=120, seeds=3).as_json()["arms"]
    assert arms["sweep-tpe"]["fresh_tiers"] == [{"confirm-a": 2}, {"confirm-a": 3}, {"confirm-a": 4}]
    assert arms["agent"]["fresh_tiers"] == [{}, {}, {}]  # a result without the key: nothing was redrawn
