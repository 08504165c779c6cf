"""False-win replay bookkeeping: which pairs are scored, and the difference interval."""

from __future__ import annotations

import json
from pathlib import Path

from controls.replay import pairs_for, sealed_f1, unpaired_diff
from gate.milestone_report import MilestoneReport
from segfactory.home import Home
from segfactory.records import sha256_file
from segfactory.stats import Interval


def test_each_promotion_is_paired_with_the_best_it_replaced(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.runs.mkdir(parents=True)
    rows = [("aa1", "aa1-ref"), ("aa1", "aa1-aa002"), ("other", "o-t001"), ("aa1", "aa1-aa006")]
    (home.runs / "promotions.jsonl").write_text(
        "".join(
            json.dumps({"run_id": r, "ticket_id": t, "model": f"/m/{t}.onnx", "sha256": t}) + "\n"
            for r, t in rows
        )
    )
    pairs = pairs_for(home, {"aa1"})
    assert [(p.ticket_id, Path(p.previous).name) for p in pairs] == [
        ("aa1-aa002", "aa1-ref.onnx"),
        ("aa1-aa006", "o-t001.onnx"),
    ]  # the A/A reference is not a win
    assert pairs_for(home, {"other"})[0].previous == "/m/aa1-aa002.onnx"


def test_the_unpaired_difference_is_conservative() -> None:
    diff = unpaired_diff(Interval(0.62, 0.60, 0.64), Interval(0.60, 0.58, 0.63))
    assert (round(diff.estimate, 6), round(diff.low, 6), round(diff.high, 6)) == (0.02, -0.03, 0.06)


def test_sealed_scores_are_read_by_model_hash(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes")
    score = {
        "object_f1": {"estimate": 0.5, "low": 0.4, "high": 0.6, "alpha": 0.1},
        "pixel_iou": 0.3,
        "dice": 0.4,
        "object_recall": 0.5,
        "n_images": 10,
    }  # what a gate pinned before the slice keys answers
    report = MilestoneReport.model_validate(
        {
            "name": "m",
            "run_id": "r",
            "tiers": {"sealed": {"version": 2, "models": {sha256_file(model): score}}},
        }
    )
    assert sealed_f1(report, model) == Interval(0.5, 0.4, 0.6, 0.1)
    other = tmp_path / "n.onnx"
    other.write_bytes(b"x")
    assert sealed_f1(report, other) is None


def test_a_scoring_error_is_the_tiers_own_key_and_an_older_gates_form_is_read() -> None:
    older = {"version": 3, "models": {"error": "the provider failed"}}  # a gate pinned before the record
    report = MilestoneReport.model_validate({"name": "m", "run_id": "r", "tiers": {"sealed": older}})
    assert report.tiers["sealed"].error == "the provider failed" and report.tiers["sealed"].models == {}
    assert report.as_json()["tiers"]["sealed"] == {"version": 3, "models": {}, "error": "the provider failed"}
