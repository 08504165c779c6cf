"""The budget plan spends a run's device time in order: cheap screens, rungs that continue the best
of the level before, and one long final of the best recipe; only the final passes the per-ticket
cap, and only because the plan's ledger (host-written) says so.

The loop is the real graph over a stub host that scores each ticket on dev by a fixed table, so
the test can say which tickets the plan must continue.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agents.budget_plan import (
    BudgetPlanner,
    Final,
    Package,
    ProfilePlan,
    Rungs,
    Screen,
    final_caps,
    load_plan,
)
from agents.graph import LoopDeps, build_graph, run_loop
from agents.incumbent import Incumbent
from agents.judge import Judge
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.state import FactoryState, RunOutcome
from agents.validate import ticket_problems
from segfactory.budgets import RunCaps, TicketCaps, load_budget_policy
from segfactory.errors import PolicyError
from segfactory.home import Home
from segfactory.layout import PlanRow, RunLayout
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from tests.agents._stubs import StubFactoryServices, make_services
from tests.agents.conftest import Log

RUN = "p1"
TICKET_S = 10.0  # every stub ticket spends this many device-seconds
TOTAL_S = 300.0  # the run's device budget
PLAN = ProfilePlan(
    screen=Screen(share=0.4, ticket_s=8),
    rungs=Rungs(share=0.3, ticket_s=10, keep=0.5),
    final=Final(share=0.3, may_exceed_ticket_cap=True),
)


@dataclass
class PlanHost:
    """The stub runner and gate, plus the dev scores and host checks the plan relies on."""

    stub: StubFactoryServices
    trained: list[Ticket] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)

    def __getattr__(self, name: str) -> object:
        return getattr(self.stub, name)

    def check(self, ticket: Ticket) -> list[str]:
        return []

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        self.trained.append(ticket)
        # later screens score lower; a continuation scores above what it continues
        base = self.scores.get(ticket.continues or "", 0.5 - 0.01 * len(self.trained))
        self.scores[ticket.id] = base + (0.05 if ticket.continues else 0.0)
        return RunOutcome(ticket_id=ticket.id, status="dev_loss", device_seconds=TICKET_S)


def _run(log: Log, tmp_path: Path) -> tuple[PlanHost, object, RunLayout]:
    host = PlanHost(make_services())
    layout = RunLayout(Home(tmp_path / "home"), RUN)
    caps = RunCaps(wall_seconds=3600, device_seconds=TOTAL_S, tickets=80, llm_tokens=0)
    seeds = itertools.count(7)
    deps = LoopDeps(
        services=host,  # type: ignore[arg-type]
        proposer=get_proposer(
            "rules",
            sink=log,
            usage=LLMUsage(),
            default_budget=Budget(device_seconds=60, epochs=2),
            caps=Budget(device_seconds=120, epochs=10),
        ),
        judge=Judge(log),
        sink=log,
        caps=caps,
        usage=LLMUsage(),
        check=lambda t: ticket_problems(t, load_budget_policy(), "demo"),
        make_seed=lambda: next(seeds),
        device_left_share=0.0,
        planner=BudgetPlanner(
            PLAN, layout, caps, TicketCaps(max_device_seconds=15, max_epochs=10), lambda: host.scores
        ),
    )
    state = run_loop(build_graph(deps, tmp_path / "state.sqlite"), RUN)
    return host, state, layout


def test_screens_then_rungs_of_the_best_then_one_final_past_the_cap(audit_log: Log, tmp_path: Path) -> None:
    host, state, layout = _run(audit_log, tmp_path)
    rows = {r.ticket_id: r for r in layout.plan_rows()}
    phases = [rows[t.id].phase for t in host.trained]
    first_rung = phases.index("rung")
    assert (
        phases[:first_rung] == ["screen"] * first_rung
        and phases[-1] == "final"
        and "screen" not in phases[first_rung:]
    )
    screens = host.trained[:first_rung]
    assert all(t.budget.device_seconds == PLAN.screen.ticket_s for t in screens)  # cut to the screen's budget
    # the rules proposer ran out of screens before their share was spent: the rungs started early
    assert first_rung * TICKET_S < PLAN.screen.share * TOTAL_S
    # the first rung continues the best half of the screens by dev score, each its own weights
    level1 = [t for t in host.trained if rows[t.id].phase == "rung" and rows[t.id].level == 1]
    best = sorted(screens, key=lambda t: host.scores[t.id], reverse=True)[: max(1, len(screens) // 2)]
    assert [t.continues for t in level1] == [t.id for t in best]
    # the final continues the best ticket of the run (the stub's best has no weights of its own)
    final = host.trained[-1]
    assert final.continues == max(host.scores, key=lambda tid: host.scores[tid] if tid != final.id else -1)
    assert final.budget.device_seconds > 15  # past the per-ticket cap, by the plan's written rule
    assert state.stop_reason == "budget plan: the final training ran"  # type: ignore[attr-defined]


def test_only_the_ticket_the_plan_recorded_as_its_final_passes_the_cap(tmp_path: Path) -> None:
    layout = RunLayout(Home(tmp_path), RUN)
    caps = TicketCaps(max_device_seconds=15, max_epochs=10)
    layout.append_plan_row(PlanRow(ticket_id="p1-t009", phase="final", level=2, budget_s=40))
    final = _ticket("p1-t009")
    assert final_caps(layout, final, caps).max_device_seconds == 40
    replicate = final.model_copy(update={"id": "p1-t009-rep", "replicate_of": "p1-t009"})
    assert final_caps(layout, replicate, caps).max_device_seconds == 40  # its replicate too
    # a proposer that labels its own ticket as the plan's final gains nothing: the ledger decides
    forged = _ticket("p1-t010").model_copy(update={"evidence": ["budget-plan:final"]})
    assert final_caps(layout, forged, caps) == caps


def test_a_plan_whose_shares_pass_one_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "budget_plan.yaml"
    bad.write_text(
        "schema_version: 1\nprofiles:\n  demo:\n    screen: {share: 0.6, ticket_s: 60}\n"
        "    rungs: {share: 0.3, ticket_s: 90, keep: 0.5}\n    final: {share: 0.3}\n"
    )
    with pytest.raises(PolicyError, match="budget_plan.yaml.*sum to 1.2"):
        load_plan("demo", bad)
    assert load_plan("demo") is not None and load_plan("nope") is None  # the shipped file holds


def _ticket(tid: str) -> Ticket:
    return Ticket.model_validate(
        {
            "id": tid,
            "arm": "agent",
            "kind": "config",
            "hypothesis": "h",
            "budget": {"device_seconds": 40, "epochs": 2},
            "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.01},
            "seed": 1,
        }
    )


def test_after_the_final_the_best_tickets_are_packaged_and_then_the_plan_ends(tmp_path: Path) -> None:
    layout = RunLayout(Home(tmp_path), RUN)
    plan = PLAN.model_copy(update={"package": Package(top_k=2, ticket_s=30)})
    caps = RunCaps(wall_seconds=3600, device_seconds=TOTAL_S, tickets=80, llm_tokens=0)
    scores = {"p1-t001": 0.4, "p1-t002": 0.6, "p1-t003": 0.5}
    planner = BudgetPlanner(
        plan, layout, caps, TicketCaps(max_device_seconds=15, max_epochs=10), lambda: scores
    )
    layout.append_plan_row(PlanRow(ticket_id="p1-t003", phase="final", level=1, budget_s=40))
    ids = iter(["p1-t004", "p1-t005"])
    state = FactoryState(run_id=RUN, device_seconds=TOTAL_S)
    [package] = planner.tickets(state, _incumbent(), lambda: next(ids), lambda: 3) or []
    assert package.kind is TicketKind.PACKAGE and package.change == {"flips": ["h"], "min_sizes": [1, 2, 3]}
    [row] = [r for r in layout.plan_rows() if r.phase == "package"]
    assert (row.ticket_id, row.members) == ("p1-t004", ["p1-t002", "p1-t003"])  # the best two on dev
    assert planner.tickets(state, _incumbent(), lambda: next(ids), lambda: 3) == []  # the plan is done
    assert planner.end_reason() == "budget plan: the final training and the package ran"


def test_a_proposal_may_not_package_nor_name_a_tickets_weights() -> None:
    policy = load_budget_policy()
    packaged = _ticket("p1-t009").model_copy(update={"kind": TicketKind.PACKAGE, "change": {"flips": ["h"]}})
    assert any(
        "packaging ticket is the budget plan's" in p for p in ticket_problems(packaged, policy, "demo")
    )
    named = _ticket("p1-t010").model_copy(update={"continues": "p1-t001"})
    assert any(
        "may continue only the incumbent's weights" in p for p in ticket_problems(named, policy, "demo")
    )
    own = _ticket("p1-t011").model_copy(update={"continues": "incumbent"})
    assert not any("continue" in p for p in ticket_problems(own, policy, "demo"))


def _incumbent() -> Incumbent:
    return Incumbent(sha256="b" * 64, model="m.onnx", config={"epochs": 2}, dataset="synthetic/v1")


def test_a_batch_of_screens_is_cut_to_what_the_screen_share_has_left(tmp_path: Path) -> None:
    """With 120 device-s of screen share (0.4 of 300) and 8-s screens, a batch of four proposed
    at 100 s spent keeps the two that fit; one proposed with nothing left keeps its first."""
    caps = RunCaps(wall_seconds=3600, device_seconds=TOTAL_S, tickets=80, llm_tokens=0)
    planner = BudgetPlanner(
        PLAN,
        RunLayout(Home(tmp_path / "home"), RUN),
        caps,
        TicketCaps(max_device_seconds=15, max_epochs=10),
        dict,
    )
    batch = [
        Ticket(
            id=f"{RUN}-t{k:03d}",
            arm=Arm.AGENT,
            expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.01),
            kind=TicketKind.CONFIG,
            hypothesis="h",
            change={"optim": {"lr": 0.001 * (k + 1)}},
            budget=Budget(device_seconds=60, epochs=2),
            seed=k,
        )
        for k in range(4)
    ]
    assert [t.id for t in planner.fit_screens(batch, spent=100.0)] == [f"{RUN}-t000", f"{RUN}-t001"]
    assert [t.id for t in planner.fit_screens(batch, spent=0.0)] == [t.id for t in batch]
    assert [t.id for t in planner.fit_screens(batch, spent=119.0)] == [f"{RUN}-t000"]
