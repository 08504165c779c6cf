"""The report opens with its outcome: the best's sealed score and interval against the classical
detector and against the best the run started from, each sentence following the records."""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from agents import report as rpt
from tests.agents import _report_fixture as fx


def _outcome(report: rpt.RunReport) -> str:
    md = rpt.render_markdown(report)
    return md[md.index("## Outcome") : md.index("## The run")]


def _with(
    promotions: list[dict[str, JsonValue]], milestone: dict[str, JsonValue] | None = None, chain: Any = None
) -> str:
    milestone = fx.milestone() if milestone is None else milestone
    headline = rpt.headline(
        fx.as_milestone(milestone), fx.as_milestone(chain), fx.as_promotions(promotions), fx.RUN
    )
    return _outcome(fx.demo_report(headline=headline, milestone=milestone))


def test_the_outcome_is_the_first_section_and_names_both_comparisons() -> None:
    md = rpt.render_markdown(fx.demo_report())
    assert md.split("\n## ")[1].startswith("Outcome\n")
    outcome = _outcome(fx.demo_report())
    assert (
        f"**The best after this run is the model of ticket t009 (`{fx.BEST[:10]}`), promoted in this run "
        "(t003, t009).** Its object F1 on the sealed tier v1 is **0.487** [0.469, 0.505] (90% interval) "
        "on 1000 images." in outcome
    )
    assert (
        f"- against the classical detector (`{fx.CLASSICAL[:10]}`): 0.155 [0.146, 0.164] (90% interval); "
        "difference +0.332, the intervals do not overlap" in outcome
    )
    assert (  # the start was promoted in an earlier run: its sealed score comes from the chain milestone
        "- against the best when the run started, the model of ticket r20261202-1733-t004 "
        f"(`{fx.START[:10]}`): 0.463 [0.448, 0.478] (90% interval); difference +0.024, the intervals overlap"
        in outcome
    )


def test_a_run_that_promoted_nothing_says_its_best_is_unchanged() -> None:
    earlier = [p for p in fx.promotions() if p["run_id"] != fx.RUN]
    outcome = _with(earlier, fx.milestone(best=fx.START))
    assert "promoted in this run (" not in outcome
    assert "unchanged: nothing was promoted in this run" in outcome
    assert "- against the best when the run started: the same model" in outcome


def test_a_run_that_started_from_the_classical_detector_says_so() -> None:
    promos = [{**fx.promotions()[1], "parent_sha256": fx.CLASSICAL}, fx.promotions()[2]]
    outcome = _with(promos, chain=fx.chain())
    assert "- the best when the run started was the classical detector" in outcome
    assert "against the classical detector (" in outcome


def test_an_unscored_or_unknown_start_is_said_plainly() -> None:
    outcome = _with(fx.promotions(), chain=None)  # no chain milestone: the start has no sealed score
    assert (
        f"- against the best when the run started (`{fx.START[:10]}`): not scored on the sealed tier"
        in outcome
    )
    no_parent = [{k: v for k, v in p.items() if k != "parent_sha256"} for p in fx.promotions()]
    assert "not known (the run's first promotion names no parent)" in _with(no_parent, chain=fx.chain())


def test_the_classical_detector_as_the_best_is_compared_with_nothing_else() -> None:
    milestone = fx.milestone(best=fx.CLASSICAL)
    milestone["models"] = {fx.CLASSICAL: "runs/baseline/baseline-classical.onnx"}
    outcome = _with([], milestone)
    assert (
        f"**The best after this run is the classical detector (`{fx.CLASSICAL[:10]}`), unchanged" in outcome
    )
    assert "- against the classical detector" not in outcome


def test_a_missing_score_says_why() -> None:
    for milestone, why in (
        (None, "no milestone was scored"),
        ({"error": "sealed quota spent"}, "the gate refused the milestone: sealed quota spent"),
        (
            {"tiers": {"never-queried": {"version": 1, "models": {}}}},
            "the sealed tier was not scored: the milestone holds no sealed tier",
        ),
        (
            {"tiers": {"sealed": {"version": 2, "models": {}, "error": "scorer crashed"}}},
            "the sealed tier was not scored: scorer crashed",
        ),
    ):
        headline = rpt.headline(fx.as_milestone(milestone), None, fx.as_promotions(fx.promotions()), fx.RUN)
        outcome = _outcome(fx.demo_report(headline=headline))
        assert f"**The best has no sealed score in this report:** {why}." in outcome


def test_the_interval_level_comes_from_the_milestone() -> None:
    milestone = fx.milestone()
    for model in milestone["tiers"]["sealed"]["models"].values():
        model["object_f1"]["alpha"] = 0.05
    assert "**0.487** [0.469, 0.505] (95% interval)" in _with(fx.promotions(), milestone, fx.chain())
