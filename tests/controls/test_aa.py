"""A/A bookkeeping: one confirm-a query per dev win, one confirm-b per replicated WIN, both rules' rates."""

from __future__ import annotations

import pytest

from agents.judge import Judge
from controls.aa import aa_ticket, noop_edit, run_aa
from segfactory.errors import DataError
from segfactory.records import Arm, Budget, Ticket, TicketKind, Verdict
from tests.controls._fakes import FakeServices, ListSink

BUDGET = Budget(device_seconds=60, epochs=2)
# Dev scores by ticket id: the reference, then 8 runs and the replicates that wins ask for.
SCORES = {
    "aa-ref": 0.50,
    "aa-aa000": 0.49,
    "aa-aa001": 0.503,
    "aa-aa002": 0.52,
    "aa-aa002-rep": 0.53,
    "aa-aa003": 0.47,
    "aa-aa004": 0.56,
    "aa-aa004-rep": 0.49,
    "aa-aa005": 0.50,
    "aa-aa006": 0.59,
    "aa-aa006-rep": 0.60,
    "aa-aa007": 0.62,
}


def verdicts(ticket: Ticket, tier: str) -> Verdict:
    return Verdict.NO_WIN if ticket.id == "aa-aa007" else Verdict.WIN


def test_aa_bookkeeping_matches_the_ledger_and_the_sandbox_runs() -> None:
    services = FakeServices(score_of=lambda t: SCORES[t.id], verdict_of=verdicts)
    result = run_aa(
        8,
        services,
        Judge(ListSink()),
        run_id="aa",
        budget=BUDGET,
        make_seed=lambda: 11,
        set_reference=services.set_reference,
    )
    s = result.summary()
    # dev wins (margin 0.005) against the moving best: 002, 004, 006 (after 002's promotion), 007
    assert s.dev_wins == 4 and s.confirm_a_wins == 3 and s.replicates == 3
    assert services.queries["confirm-a"] == ["aa-aa002", "aa-aa004", "aa-aa006", "aa-aa007"]
    assert services.queries["confirm-b"] == ["aa-aa002-rep", "aa-aa006-rep"]  # 004's replicate lost on dev
    assert len(services.queries["confirm-a"]) == s.dev_wins
    assert len(services.queries["confirm-b"]) == s.confirm_b_queries
    assert len(services.tickets) == 1 + 8 + 3  # reference + runs + replicates: every one a sandbox run
    gate, naive = s.gate_rule, s.naive_rule
    assert (gate.wins, gate.runs) == (2, 8) and services.promoted == ["aa-aa002", "aa-aa006"]
    assert (naive.wins, naive.runs) == (5, 8)  # 0.503 0.52 0.56 0.59 0.62 beat 0.50; 0.50 ties
    assert gate.false_win_rate.k == gate.false_win_rate.n == 2  # every win is false by construction
    assert gate.wins_per_run.wilson.low < 0.25 < gate.wins_per_run.wilson.high
    assert s.selection_effect["n"] == 8


def test_aa_tickets_are_the_default_config_with_no_op_code_edits() -> None:
    plain, code = aa_ticket("aa", 0, BUDGET, 5), aa_ticket("aa", 1, BUDGET, 6)
    assert plain.kind is TicketKind.CONFIG and plain.change == {} and plain.arm is Arm.AA
    assert code.kind is TicketKind.CODE and code.change["config"] == {}
    ((name, text),) = code.change["files"].items()
    original = (__import__("pathlib").Path(__file__).resolve().parents[2] / name).read_text()
    assert text.startswith(original) and text[len(original) :].strip().startswith("#")
    assert noop_edit(3)[name][len(original) :].strip() == ""  # whitespace only


def test_an_aa_without_a_reference_fails_clearly() -> None:
    services = FakeServices(score_of=lambda t: None)
    with pytest.raises(DataError, match="reference"):
        run_aa(
            2,
            services,
            Judge(ListSink()),
            run_id="aa",
            budget=BUDGET,
            make_seed=lambda: 1,
            set_reference=services.set_reference,
        )


def test_runs_that_could_not_win_are_not_counted_as_runs_that_did_not() -> None:
    """A run that failed to train, or whose replicate failed after a confirm-a WIN, reached no
    decision: the gate rule's rate counts only the runs that did, and the command exits 1."""
    import typer

    from cli.controls_cmds import _refuse_failed_runs

    scores = {
        "aa-ref": 0.50,
        "aa-aa000": 0.49,
        "aa-aa001": None,
        "aa-aa002": 0.52,
        "aa-aa002-rep": None,
        "aa-aa003": None,
    }
    services = FakeServices(score_of=lambda t: scores[t.id])
    result = run_aa(
        4,
        services,
        Judge(ListSink()),
        run_id="aa",
        budget=BUDGET,
        make_seed=lambda: 11,
        set_reference=services.set_reference,
    )
    s = result.summary()
    assert (s.runs, s.failed, s.undecided) == (4, 2, 1)
    assert (s.gate_rule.wins, s.gate_rule.runs) == (0, 1)  # only aa000 reached a decision
    assert s.gate_rule.wins_per_run.n == 1  # not 4: failures are not evidence of no false win
    assert (s.naive_rule.wins, s.naive_rule.runs) == (1, 2)
    with pytest.raises(typer.Exit) as exited:
        _refuse_failed_runs(s, result.runs)
    assert exited.value.exit_code == 1
    _refuse_failed_runs(
        s.model_copy(update={"failed": 0, "undecided": 0}), result.runs
    )  # nothing lost: no error


def test_continued_runs_continue_the_reference_and_meet_a_continuation_reference() -> None:
    """The continued kind: the continuation reference and every continued candidate start from
    the fresh reference's weights (by ticket id, never "the incumbent", which by then is the
    continuation reference), with the same recipe and budget; each kind is judged against its own
    reference, and both count in the top-level rates."""
    scores = {
        "aa-ref": 0.50,
        "aa-aa000": 0.52,  # a fresh dev win, NO_WIN below
        "aa-aa001": 0.49,
        "aa-cref": 0.60,
        "aa-ct000": 0.59,
        "aa-ct001": 0.62,  # a continued dev win against the continuation reference
        "aa-ct001-rep": 0.63,
        "aa-ct002": 0.55,
    }
    references: list[str] = []
    services = FakeServices(
        score_of=lambda t: scores[t.id],
        verdict_of=lambda t, tier: Verdict.WIN if t.id.startswith("aa-ct") else Verdict.NO_WIN,
    )

    def set_reference(ticket_id: str) -> None:
        references.append(ticket_id)
        services.set_reference(ticket_id)

    long = Budget(device_seconds=45, epochs=40)
    result = run_aa(
        5,
        services,
        Judge(ListSink()),
        run_id="aa",
        budget=BUDGET,
        make_seed=iter(range(100, 200)).__next__,
        set_reference=set_reference,
        continued=3,
        continuation_budget=long,
    )
    assert references == ["aa-ref", "aa-cref"]
    by_id = {t.id: t for t in services.tickets}
    assert [by_id[f"aa-aa{i:03d}"].continues for i in range(2)] == [None, None]
    continued = [by_id[i] for i in ("aa-cref", "aa-ct000", "aa-ct001", "aa-ct002", "aa-ct001-rep")]
    assert {t.continues for t in continued} == {"aa-ref"}
    assert {(t.kind, canonical(t.change), t.budget) for t in continued} == {(TicketKind.CONFIG, "{}", long)}
    assert len({t.seed for t in continued}) == len(continued)  # each a seed of its own
    s = result.summary()
    assert (s.runs, s.continued, s.continuation_dev_score) == (5, 3, 0.60)
    fresh, cont = s.kinds["fresh"], s.kinds["continued"]
    assert (fresh.runs, fresh.reference_dev_score, fresh.dev_wins) == (2, 0.50, 1)
    assert (fresh.naive_rule.wins, fresh.gate_rule.wins) == (1, 0)
    assert (cont.runs, cont.reference_dev_score, cont.dev_wins) == (3, 0.60, 1)
    assert (cont.naive_rule.wins, cont.naive_rule.runs) == (1, 3)  # 0.62 beats 0.60; 0.59, 0.55 do not
    assert (cont.gate_rule.wins, cont.gate_rule.runs) == (1, 3) and services.promoted == ["aa-ct001"]
    assert (s.gate_rule.wins, s.gate_rule.runs) == (1, 5)  # both kinds
    assert (s.naive_rule.wins, s.naive_rule.runs) == (2, 5)
    assert s.selection_effect is not None and s.selection_effect["n"] == 2  # the fresh runs' scores


@pytest.mark.parametrize("continued", [-1, 3])
def test_a_continued_count_outside_the_runs_is_refused(continued: int) -> None:
    services = FakeServices(score_of=lambda t: 0.5)
    with pytest.raises(ValueError, match=f"continued={continued}: expected 0..2"):
        run_aa(
            2,
            services,
            Judge(ListSink()),
            run_id="aa",
            budget=BUDGET,
            make_seed=lambda: 1,
            set_reference=services.set_reference,
            continued=continued,
        )
    assert services.tickets == []  # refused before anything trained


def test_a_continuation_trains_a_rung_of_the_profile_plan_sized_to_its_budget() -> None:
    from agents.budget_plan import load_plan
    from controls.aa import continuation_budget
    from segfactory.budgets import ticket_caps

    plan = load_plan("demo")
    assert plan is not None
    got = continuation_budget("demo", BUDGET)
    assert got == Budget(device_seconds=plan.rungs.ticket_s, epochs=ticket_caps("demo").max_epochs)
    assert got.epochs > 4  # above the demo recipe's own epochs: trained as long as its budget holds


def canonical(change: object) -> str:
    import json

    return json.dumps(change, sort_keys=True)
