"""Each line of "What this run did not do" and each caveat follows the run's records: change the
fact and the line changes, both ways. Built on the demo-like report of ``_report_fixture``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents import report as rpt
from agents.approvals import ApprovalQueue
from agents.state import FactoryState, Round
from segfactory.home import Home
from segfactory.layout import RunLayout
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from tests.agents import _report_fixture as fx
from tests.agents.conftest import Log

# Sentences the report used to print whatever the run did; none may come back.
FIXED_FALSEHOODS = (
    "Tickets start from the profile's base config, not from the promoted model's config",
    "is not built yet",
    "No code-editing (`agent-code`) tickets ran",
    "none is registered unless a person adds one",
)


def _section(report: rpt.RunReport, title: str) -> str:
    md = rpt.render_markdown(report)
    start = md.index(f"## {title}")
    end = md.find("\n## ", start + 1)
    return md[start : end if end != -1 else len(md)]


def _did_not_do(**update: Any) -> str:
    return _section(fx.demo_report(**update), "What this run did not do")


def _tickets(**update: Any) -> list[rpt.TicketRow]:
    return [t.model_copy(update=update) for t in fx.rows()]


def test_no_fixed_sentence_outlives_what_it_described() -> None:
    for report in (fx.demo_report(), fx.demo_report(proposer="openai:gpt-4o", code_agent=True)):
        md = rpt.render_markdown(report)
        for sentence in FIXED_FALSEHOODS:
            assert sentence not in md


def test_no_llm_follows_the_proposer() -> None:
    assert "**No LLM was configured.**" in _did_not_do(proposer="rules")
    assert "No LLM was configured" not in _did_not_do(proposer="anthropic:claude-sonnet-4-5")


def test_no_code_ticket_follows_the_tickets_and_the_code_agent() -> None:
    off = _did_not_do(code_agent=False)
    assert "No code ticket ran; the code-editing agent was off" in off
    on = _did_not_do(code_agent=True)
    assert "No code ticket ran, though the code-editing agent was on" in on and "was off" not in on
    code_ticket = fx.rows()[0].model_copy(update={"kind": TicketKind.CODE.value, "arm": Arm.AGENT_CODE.value})
    ran = _did_not_do(code_agent=True, tickets=[code_ticket, *fx.rows()[1:]])
    assert "No code ticket ran" not in ran


def test_no_control_arm_follows_the_arms_that_trained() -> None:
    assert "No control arm (a sweep, A/A or nnU-Net) trained in this run" in _did_not_do()
    arm = _did_not_do(fill_budget=True)
    assert "it is an agent arm of `segfactory compare`" in arm
    swept = fx.rows()[0].model_copy(update={"arm": Arm.SWEEP_TPE.value})
    assert "No control arm" not in _did_not_do(tickets=[swept, *fx.rows()[1:]])


def test_unscored_tiers_follow_the_milestone_and_the_gates_tiers() -> None:
    none = _did_not_do(gate_tiers=["confirm-a", "confirm-b", "sealed", "never-queried"])
    assert "The real-holdout tier was not scored: the gate holds no real-holdout tier" in none
    assert "`segfactory gate add-real` adds one" in none
    held = _did_not_do(gate_tiers=["confirm-a", "real-holdout", "sealed", "never-queried"])
    assert "the gate holds one, but this run's milestone did not score it" in held
    assert f"`segfactory gate milestone --run {fx.RUN} --tiers real-holdout` does" in held
    assert "The real-holdout tier was not scored." in _did_not_do(gate_tiers=None)
    milestone = fx.milestone()
    milestone["tiers"]["real-holdout"] = milestone["tiers"]["sealed"]
    assert "real-holdout tier was not scored" not in _did_not_do(milestone=milestone)
    milestone["tiers"]["real-holdout"] = {"version": 1, "models": {}, "error": "the scorer timed out"}
    assert "The real-holdout tier was not scored: the scorer timed out" in _did_not_do(milestone=milestone)
    assert "The sealed tier was not scored" not in _did_not_do()
    del milestone["tiers"]["sealed"]
    assert "The sealed tier was not scored" in _did_not_do(milestone=milestone)
    assert "No milestone was scored" in _did_not_do(milestone=None)
    refused = _did_not_do(milestone={"name": "x", "run_id": fx.RUN, "error": "sealed quota spent"})
    assert (
        "The gate refused the milestone, so no held-back tier scored the best: sealed quota spent" in refused
    )


def test_a_trained_start_follows_the_lineage() -> None:
    assert "No ticket started from a trained model" not in _did_not_do()  # the demo built on promotions
    run = _section(fx.demo_report(), "The run")
    assert f"- tickets built on: r20261202-1733-t004's config (`{fx.START[:10]}`) ×4" in run
    classical = _tickets(built_on=fx.CLASSICAL, built_on_ticket=None)
    line = _did_not_do(tickets=classical)
    assert (
        f"No ticket started from a trained model: all {len(classical)} tickets patched "
        f"`configs/run-demo.yaml`, because the best they built on (`{fx.CLASSICAL[:10]}`) is the "
        "classical detector." in line
    )
    assert "tickets built on" not in _section(fx.demo_report(tickets=classical), "The run")
    unrecorded = _tickets(built_on=fx.START, built_on_ticket=None)  # promoted before lineage was kept
    assert "has no recorded training config" in _did_not_do(tickets=unrecorded)
    assert "No ticket started" not in _did_not_do(tickets=_tickets(built_on=None, built_on_ticket=None))
    one = _did_not_do(tickets=classical[:1])
    assert "No ticket started from a trained model: the one ticket patched `configs/run-demo.yaml`" in one


def test_robustness_follows_the_tickets_the_gate_scored() -> None:
    line = _did_not_do()
    trained = sum(1 for t in fx.rows() if t.dev_metrics)
    gated = sum(1 for t in fx.rows() if t.dev_metrics and t.tier)
    assert f"checked only inside the gate's verdicts, for the {gated} of {trained} that it scored" in line
    ungated = _tickets(tier=None)
    assert "checked nowhere: no ticket reached the gate" in _did_not_do(tickets=ungated)
    assert "perturbation score" not in _did_not_do(tickets=_tickets(dev_metrics={}))


def test_learning_curve_caveat_follows_the_plots(tmp_path: Path) -> None:
    assert "learning curves are the sandboxed worker's own report" not in _did_not_do()
    fx.curves(tmp_path / "tickets")
    rpt.write(fx.demo_report(), tmp_path / "people", tmp_path / "tickets")
    written = rpt.RunReport.model_validate_json((tmp_path / "people" / rpt.REPORT_JSON).read_text())
    assert "curves" in written.plots
    assert "learning curves are the sandboxed worker's own report" in _section(
        written, "What this run did not do"
    )


def test_nothing_promoted_and_not_run_follow_the_counts_and_the_queue() -> None:
    assert "Nothing was promoted" not in _did_not_do()
    counts = {**fx.demo_report().counts, "promoted": 0}
    assert "Nothing was promoted: the current best is unchanged by this run." in _did_not_do(counts=counts)
    assert "- 1 ticket in the queue did not run before the budget was spent." in _did_not_do()
    assert "did not run before the budget" not in _did_not_do(not_run=[])
    two = [{"id": f"{fx.RUN}-t0{k}", "hypothesis": "exploration"} for k in (15, 16)]
    assert "- 2 tickets in the queue did not run" in _did_not_do(not_run=two)


def test_the_audit_window_follows_the_anchor() -> None:
    audit = fx.demo_report().audit
    assert audit is not None
    assert "no unanchored window" in _section(fx.demo_report(), "Audit")
    open_window = _section(fx.demo_report(audit=audit.model_copy(update={"unanchored_from": 1880})), "Audit")
    assert "records from seq 1880 on came after it; the run's end anchors them" in open_window
    assert "no unanchored window" not in open_window


def test_a_broken_chain_lists_its_first_problems_and_counts_the_rest() -> None:
    audit = fx.demo_report().audit
    assert audit is not None
    assert "- chain: verified;" in _section(fx.demo_report(), "Audit")
    broken = audit.model_copy(update={"ok": False, "problems": [f"seq {k}: hash mismatch" for k in range(5)]})
    text = _section(fx.demo_report(audit=broken), "Audit")
    assert (
        "- chain: FAILED: seq 0: hash mismatch; seq 1: hash mismatch; seq 2: hash mismatch (and 2 more"
        in text
    )


def _request(tid: str) -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.AGENT,
        kind=TicketKind.DATA_REQUEST,
        hypothesis=f"real images of thin voids ({tid})",
        change={"request_real": 200},
        budget=Budget(device_seconds=60, epochs=2),
        seed=1,
        expected_effect=ExpectedEffect(metric="dice", slice="thin", direction=Direction.UP, size=0.02),
    )


@pytest.fixture
def queue(audit_log: Log, tmp_path: Path) -> ApprovalQueue:
    return ApprovalQueue(tmp_path / "state.sqlite", audit_log)


def test_approvals_say_which_run_took_each_request(queue: ApprovalQueue) -> None:
    for tid, run in (("r0-dr1", "r0"), ("r1-dr1", "r1"), ("r1-dr2", "r1"), ("r1-dr3", "r1")):
        queue.request(_request(tid), run)
    queue.decide("r0-dr1", approve=True, by="ana")  # after r0 ended: r1 takes it up
    queue.decide("r1-dr2", approve=True, by="ana")  # approved, no run took it yet
    queue.decide("r1-dr3", approve=False, by="bo", reason="no budget for real images")
    assert queue.take("r0-dr1", "r1")
    rows = rpt.approval_rows(queue, "r1")
    assert [(a.id, a.taken_by) for a in rows] == [
        ("r0-dr1", "r1"),
        ("r1-dr1", None),
        ("r1-dr2", None),
        ("r1-dr3", None),
    ]
    text = _section(fx.demo_report(run_id="r1", approvals=rows), "Data requests (approvals queue)")
    assert "- r0-dr1 (asked by run r0): approved; queued in this run as data ticket r0-dr1-data" in text
    assert "- r1-dr1: pending; decide with `segfactory approvals approve|deny r1-dr1`" in text
    assert "- r1-dr2: approved; not taken up yet: the next run in this home queues it" in text
    assert "- r1-dr3: denied by bo: no budget for real images" in text
    assert queue.take("r1-dr2", "r2")  # a later run takes it: r1's report says so when rewritten
    again = _section(fx.demo_report(run_id="r1", approvals=rpt.approval_rows(queue, "r1")), "Data requests")
    assert "- r1-dr2: approved; taken up by run r2" in again
    assert [a.id for a in rpt.approval_rows(queue, "r2")] == ["r1-dr2"]
    assert "No data requests were made." in _section(fx.demo_report(approvals=[]), "Data requests")


def test_the_starting_best_is_the_first_rounds_not_the_first_folder_by_name(tmp_path: Path) -> None:
    layout = RunLayout(Home(tmp_path), "run")
    for sha in ("ff" * 32, "00" * 32):  # the start sorts last by name
        layout.analysis_dir(sha).mkdir(parents=True)
        (layout.analysis_dir(sha) / "report.json").write_text("{}")
    rounds = [
        Round(round=1, first_ticket=1, incumbent="ff" * 32),
        Round(round=2, first_ticket=3, incumbent="00" * 32),
    ]
    state = FactoryState(run_id="run", rounds=rounds)
    assert rpt.first_analysis(layout, state) == str(layout.analysis_dir("ff" * 32))
    assert rpt.first_analysis(layout, FactoryState(run_id="run")) is None
