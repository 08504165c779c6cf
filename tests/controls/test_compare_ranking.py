"""The plan's metric: arms ranked by sealed worst-slice recall, object F1 beside it, paired differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controls.compare import _curve, _nnunet_arm
from controls.compare_report import ArmRun, SealedScores, pairwise_differences, ranking, summarise
from controls.nnunet_arm import NNUNET_MAX_EPOCHS, NnunetArmSummary, nnunet_ticket
from controls.pipeline import CandidateResult
from segfactory.home import Home
from segfactory.records import Verdict


def run(f1: float, worst: float | None) -> ArmRun:
    return ArmRun(
        curve=_curve([(100.0, 0.5)]),
        sealed=SealedScores(
            object_f1={"estimate": f1, "low": f1 - 0.02, "high": f1 + 0.02}, worst_slice_recall=worst
        ),
    )


def test_arms_are_ranked_by_worst_slice_not_by_object_f1() -> None:
    results = {
        "agent": [run(0.50, 0.20), run(0.52, 0.22), run(0.48, 0.18)],
        "nnunet": [run(0.70, 0.30), run(0.72, 0.34), run(0.71, 0.29)],
        "sweep-tpe": [run(0.55, 0.10), run(0.56, 0.12), run(0.54, 0.08)],
    }  # better F1, worse worst slice
    rank = ranking(results)
    assert rank.metric == "worst_slice_recall" and rank.order == ["nnunet", "agent", "sweep-tpe"]
    assert rank.note is None and rank.per_arm["agent"]["object_f1"].n == 3
    pairs = pairwise_differences(results)
    d = pairs["agent - nnunet"]["worst_slice_recall"]
    assert d.per_seed == pytest.approx([-0.10, -0.12, -0.11]) and d.high is not None and d.high < 0
    assert pairs["agent - sweep-tpe"]["object_f1"].mean == pytest.approx(-0.05)
    summary = summarise(results, proposer="rules", budget_s=480, seeds=3).as_json()
    assert summary["ranking_text"].startswith("Ranked by mean sealed worst-slice recall: nnunet 0.310")
    assert "nnunet minus agent: +0.110" in summary["verdict"]
    assert {"arms", "sweep_minus_agent", "verdict", "seeds", "proposer"} <= set(summary)  # the old keys stay


def test_without_a_worst_slice_score_the_ranking_says_so() -> None:
    results = {"agent": [run(0.5, None)], "nnunet": [run(0.7, None)]}
    rank = ranking(results)
    assert (
        rank.metric == "object_f1"
        and rank.order == ["nnunet", "agent"]
        and "no worst-slice" in str(rank.note)
    )
    assert pairwise_differences(results)["agent - nnunet"]["object_f1"].low is None  # one seed: no interval


def test_the_nnunet_ticket_is_one_run_at_the_arms_budget() -> None:
    from runner import TicketCaps, refusal_reason
    from runner._workspace import ticket_config

    ticket = nnunet_ticket("cmp", 480.0, seed=7)
    config = ticket_config({"epochs": 2, "batch_size": 16}, ticket)
    assert config["engine"] == "nnunet" and config["epochs"] == NNUNET_MAX_EPOCHS
    assert config["nnunet"]["time_budget_s"] == 470.0 and config["seed"] == 7
    assert refusal_reason(ticket, TicketCaps(max_device_seconds=480, max_epochs=NNUNET_MAX_EPOCHS)) is None
    assert "exceeds the policy limit" in str(
        refusal_reason(ticket, TicketCaps(max_device_seconds=120, max_epochs=NNUNET_MAX_EPOCHS))
    )


def test_the_nnunet_arm_reads_its_ticket_and_plan(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    folder = home.tickets_dir("nn") / "nn-nnunet"
    folder.mkdir(parents=True)
    (folder / "outcome.json").write_text(json.dumps({"device_seconds": 470.0}))
    summary = NnunetArmSummary(
        run_id="nn",
        budget_s=480.0,
        plan={"patch_size": [64, 64], "epochs": 6},
        replicate_plan=None,
        candidate=CandidateResult(
            ticket_id="nn-nnunet",
            dev_score=0.61,
            replicate_id=None,
            status="dev_win",
            confirm_a=Verdict.NO_WIN,
            decision="reject",
        ),
    )
    arm = _nnunet_arm(home, summary)
    assert arm.curve == [(470.0, 0.61)] and arm.best_ticket == "nn-nnunet"
    assert (arm.dev_wins, arm.confirm_a_wins, arm.promoted) == (1, 0, 0)
    assert arm.plan is not None and arm.plan["epochs"] == 6


def test_compare_json_keeps_each_arms_shape() -> None:
    from controls.compare import _dump

    agent = ArmRun(
        run_id="r1",
        curve=[(80.0, 0.3)],
        best_ticket="r1-t001",
        llm={},
        promoted=0,
        dev_wins=1,
        confirm_a_wins=0,
    ).model_copy(update={"start_best": "b", "restored_before": False, "fresh_tiers": {}})
    agent.sealed = SealedScores(
        object_f1={"estimate": 0.5, "low": 0.48, "high": 0.52, "alpha": 0.1},
        worst_slice_recall=0.2,
        slice_recall={"tiny": 0.2},
        slice_voids={"tiny": 448},
    )
    nnunet = ArmRun(run_id="nn", curve=[], llm={}, plan={"epochs": 6}, replicate_plan=None)
    rows = json.loads(json.dumps(_dump({"agent": [agent], "nnunet": [nnunet]})))
    assert rows["agent"][0] == {
        "run_id": "r1",
        "curve": [[80.0, 0.3]],
        "best_ticket": "r1-t001",
        "llm": {},
        "promoted": 0,
        "dev_wins": 1,
        "confirm_a_wins": 0,
        "start_best": "b",
        "restored_before": False,
        "fresh_tiers": {},
        "sealed": {
            "object_f1": {"estimate": 0.5, "low": 0.48, "high": 0.52, "alpha": 0.1},
            "worst_slice_recall": 0.2,
            "slice_recall": {"tiny": 0.2},
            "slice_voids": {"tiny": 448},
        },
    }  # the keys compare.json always had; no plan for an agent arm, no sealed before the milestone
    assert rows["nnunet"][0] == {
        "run_id": "nn",
        "curve": [],
        "llm": {},
        "plan": {"epochs": 6},
        "replicate_plan": None,
    }
    with pytest.raises(ValueError):
        ArmRun(run_id="x", surprise=1)  # type: ignore[call-arg]  # a misspelt field is refused, not kept


def test_the_summary_keeps_its_json_shape() -> None:
    """``compare --json``'s keys, pinned: the summary, an arm (``yield`` under its own name), the
    ranking and a pair's differences; the last five keys come only once ``run_compare`` adds them."""
    results = {"agent": [run(0.5, 0.2), run(0.52, 0.22)], "sweep-tpe": [run(0.55, 0.1), run(0.56, 0.12)]}
    summary = summarise(results, proposer="rules", budget_s=480.0, seeds=2)
    out = summary.as_json()
    assert set(out) == {
        "arms",
        "seeds",
        "budget_s_per_arm_and_seed",
        "proposer",
        "sweep_minus_agent",
        "verdict",
        "ranking",
        "paired_differences",
        "ranking_text",
    }
    assert set(out["arms"]["agent"]) == {
        "seeds",
        "sealed_object_f1",
        "mean_sealed_object_f1",
        "best_dev_so_far",
        "dev_wins",
        "confirm_a_wins",
        "promoted",
        "sealed_worst_slice_recall",
        "device_seconds",
        "start_best",
        "fresh_tiers",
        "plans",
        "yield",
    }
    assert out["arms"]["agent"]["sealed_object_f1"][0] == {
        "object_f1": {"estimate": 0.5, "low": 0.48, "high": 0.52},
        "worst_slice_recall": 0.2,
    }  # only the keys the milestone gave
    assert set(out["ranking"]) == {"metric", "order", "note", "per_arm", "per_seed"}
    assert set(out["paired_differences"]["agent - sweep-tpe"]["object_f1"]) == {
        "per_seed",
        "n",
        "mean",
        "confidence",
        "low",
        "high",
    }
    assert set(out["sweep_minus_agent"]) == {"arm", "per_seed", "confidence", "mean", "low", "high"}
    done = summary.model_copy(
        update={
            "compare_id": "c",
            "plot": "p.png",
            "report": "compare.json",
            "incumbent": "sha",
            "replay": {},
        }
    )
    assert set(done.as_json()) - set(out) == {"compare_id", "plot", "report", "incumbent", "replay"}


def test_run_compare_writes_the_summary_with_its_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a comparison: the summary gets its replay, plot and report, and compare.json holds
    what ``compare --json`` prints (the arms themselves are run by ``run_arms``, replaced here)."""
    from controls import compare
    from controls.isolation import Incumbent

    home = Home(tmp_path / "home")
    home.root.mkdir(parents=True)
    home.marker.write_text('{"profile": "default", "created": 0.0, "layout": 1}')
    results = {"agent": [run(0.5, 0.2)], "sweep-tpe": [run(0.55, 0.1)]}
    monkeypatch.setattr(
        compare, "run_arms", lambda *args: (Incumbent(sha256="b" * 64, model=tmp_path / "m.onnx"), results)
    )
    summary = compare.run_compare(
        home.root,
        arms=["agent", "sweep-tpe"],
        seeds=1,
        budget_s=60.0,
        proposer="rules",
        profile="default",
        backend="bwrap",
        progress=lambda line: None,
    )
    written = json.loads(Path(str(summary.report)).read_text())
    assert written["summary"] == json.loads(json.dumps(summary.as_json()))
    assert written["summary"]["replay"]["agent"] == {
        "promoted": 0,
        "scored": 0,
        "rows": [],
        "false_win_rate": written["summary"]["replay"]["agent"]["false_win_rate"],
    }  # no promotion to replay: every key all the same
    assert Path(str(summary.plot)).is_file() and summary.incumbent == "b" * 64
    assert set(written["arms"]) == {"agent", "sweep-tpe"}
