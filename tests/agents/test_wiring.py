"""The graph's wiring to the host services: promotion is called by code, a replicate that loses on
dev spends no confirm-b query, and the run report renders every ticket from a final state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agents import report as rpt
from agents._report_md import render_markdown
from agents._run_loop import host_seeds
from agents.graph import run_loop
from agents.state import RunOutcome
from segfactory.home import Home
from segfactory.layout import DevComparison, RunLayout, RunRecord
from segfactory.records import Ticket
from tests.agents._stubs import make_graph, make_services
from tests.agents.conftest import Log


class ReplicateLosesOnDev:
    """The stub runner, except that every replicate trains to a dev loss."""

    def __init__(self) -> None:
        self.stub = make_services()

    def __getattr__(self, name: str) -> object:
        return getattr(self.stub, name)

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        outcome = self.stub.run_ticket(ticket)
        if ticket.replicate_of is None:
            return outcome
        return outcome.model_copy(update={"status": "dev_loss"})


def test_promote_is_called_once_after_the_replicate_win(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    state = run_loop(make_graph(services, audit_log, tmp_path), "w1")
    assert services.promoted == ["w1-t001"]
    assert [d.decision for d in state.decisions if d.ticket_id == "w1-t001"] == [
        "replicate",
        "promote",
    ]


def test_a_replicate_that_loses_on_dev_is_rejected_without_a_query(audit_log: Log, tmp_path: Path) -> None:
    services = ReplicateLosesOnDev()
    state = run_loop(make_graph(services, audit_log, tmp_path), "w2")  # type: ignore[arg-type]
    assert "w2-t001-rep" not in services.stub.queries and "w2-t001" in services.stub.queries
    decisions = [(d.ticket_id, d.decision) for d in state.decisions]
    assert ("w2-t001", "reject") in decisions and ("w2-t001", "promote") not in decisions
    assert services.stub.promoted == [] and state.awaiting_replicate == {}
    assert any(
        p["decision"]["reason"].startswith("the replicate w2-t001-rep did not win on dev")
        for p in audit_log.events("judge_decision")
        if "reason" in p.get("decision", {})
    )


def test_the_report_lists_every_ticket_and_says_no_llm_was_configured(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    state = run_loop(make_graph(services, audit_log, tmp_path), "w3")
    layout = RunLayout(Home(tmp_path / "home"), "w3")
    layout.append_dev_comparison(
        DevComparison(
            ticket_id="w3-t001",
            object_f1=0.3,
            best_object_f1=0.2,
            best_sha256="b",
            dev_margin=0.005,
            dev_win=True,
            metrics={"object_f1": 0.3},
            threshold=0.5,
            parent_sha256="b",
        )
    )
    rows = rpt.ticket_rows(state, layout, [])
    assert [r.ticket_id for r in rows] == [h.ticket_id for h in state.history]
    counts = rpt.counts(rows, state)
    assert counts["promoted"] == 1 and counts["survived_confirm_a"] == 2 and counts["dev_wins"] == 1
    report = rpt.RunReport(
        run_id="w3",
        profile="demo",
        proposer="rules",
        backend="bwrap",
        stop_reason="done",
        started_at=1.0,
        ended_at=2.0,
        win_rule_sha256="ab" * 32,
        tickets=rows,
        not_run=[],
        approvals=[],
        counts=counts,
        device_seconds=50.0,
        milestone=None,
        audit=None,
        llm_usage={},
        analysis_dir=None,
    )
    paths = rpt.write(report, tmp_path / "people")
    md = paths["md"].read_text()
    assert "No LLM was configured" in md and "## What this run did not do" in md
    for row in rows:
        assert row.ticket_id in md
    assert "DEV_LOSS" in md and "FAILED" in md  # the tickets that did nothing are listed too
    assert paths["html"].read_text().startswith("<!doctype html>")
    assert render_markdown(report) == md


def test_the_run_stops_when_the_next_ticket_would_pass_the_wall_time(audit_log: Log, tmp_path: Path) -> None:
    import itertools

    from agents.graph import LoopDeps, build_graph
    from agents.judge import Judge
    from agents.llm import LLMUsage
    from agents.proposer import get_proposer
    from agents.validate import ticket_problems
    from segfactory.budgets import RunCaps, load_budget_policy
    from segfactory.records import Budget

    policy = load_budget_policy()
    services = make_services()
    ran = itertools.count(1)
    tickets_done = [0]
    train = services.run_ticket

    def a_ticket_takes_100_s(ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        tickets_done[0] = next(ran)
        return train(ticket, wall_left_s=wall_left_s)

    services.run_ticket = a_ticket_takes_100_s  # type: ignore[method-assign]
    deps = LoopDeps(
        services=services,
        judge=Judge(audit_log),
        sink=audit_log,
        usage=LLMUsage(),
        proposer=get_proposer(
            "rules",
            sink=audit_log,
            usage=LLMUsage(),
            default_budget=Budget(device_seconds=60, epochs=2),
            caps=Budget(device_seconds=120, epochs=10),
        ),
        caps=RunCaps(wall_seconds=250, device_seconds=600, tickets=20, llm_tokens=0),
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_seed=lambda: 7,
        clock=lambda: 100.0 * tickets_done[0],
    )
    state = run_loop(build_graph(deps, tmp_path / "state.sqlite"), "w4")
    assert state.tickets_run == 2  # 200 s spent at 100 s a ticket: a third would end at 300 > 250
    assert state.stop_reason == "budget: wall time 250 s would be passed by the next ticket"


def test_a_run_seed_reproduces_the_host_seeds_and_a_resume_draws_fresh_ones() -> None:
    def record(seed: int | None) -> RunRecord:
        return RunRecord(
            run_id="r1",
            profile="demo",
            backend="bwrap",
            win_rule_sha256="w",
            started_at=0.0,
            user="u",
            seed=seed,
        )

    def five(seeds: Callable[[], int]) -> list[int]:
        return [seeds() for _ in range(5)]

    assert five(host_seeds(record(7), resumed=False)) == five(host_seeds(record(7), resumed=False))
    assert five(host_seeds(record(8), resumed=False)) != five(host_seeds(record(7), resumed=False))
    assert five(host_seeds(record(7), resumed=True)) != five(host_seeds(record(7), resumed=False))
    assert len(set(five(host_seeds(record(None), resumed=False)))) > 1
