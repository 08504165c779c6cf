"""The factory loop (LangGraph + SQLite checkpoints) against stub runner/gate services.

``StubFactoryServices`` is a test-only stand-in for the runner and the gate, which are built in
another issue: scripted dev outcomes, a gate that caches by ticket id and counts queries, and a
planted "confirm score" sentinel that must never reach the graph state or the audit log.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.context import DevAnalysis
from agents.graph import FactoryState, LoopDeps, RunOutcome, build_graph, run_loop
from agents.judge import Judge
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.validate import RunCaps, load_budget_policy, ticket_problems
from segfactory.records import Budget, CoarseVerdict, Ticket, Verdict
from tests.agents.conftest import Log, recommendation

SENTINEL = 0.987654321  # a confirm score only the stub gate knows


class Crash(Exception):
    """Stands in for a kill -9 at a chosen point."""


@dataclass
class StubFactoryServices:
    """Test stub of the runner + gate: outcome and verdict per recommendation key."""

    dev: dict[str, str]  # change key -> dev_win | dev_loss | failed
    gate: dict[str, list[Verdict]]  # change key -> verdicts for confirm-a, then confirm-b
    runs: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    cache: dict[str, CoarseVerdict] = field(default_factory=dict)
    crash_in_run: set[str] = field(default_factory=set)
    crash_after_gate: set[str] = field(default_factory=set)
    ended: list[str] = field(default_factory=list)

    def analyse(self) -> DevAnalysis:
        recs = tuple(recommendation(f"r{i}", key, 1) for i, key in enumerate(self.dev, 1))
        return DevAnalysis(summary="dev IoU 0.6", recommendations=recs)

    def run_ticket(self, ticket: Ticket) -> RunOutcome:
        self.runs.append(ticket.id)
        if ticket.id in self.crash_in_run:
            self.crash_in_run.discard(ticket.id)
            raise Crash(ticket.id)
        status = self.dev[next(iter(ticket.change))]
        return RunOutcome(ticket_id=ticket.id, status=status, device_seconds=10,  # type: ignore[arg-type]
                          model_ref=None if status == "failed" else f"models/{ticket.id}.onnx")

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        if ticket.id not in self.cache:  # the gate answers a repeated ticket id from its cache
            self.queries.append(ticket.id)
            verdicts = self.gate[next(iter(ticket.change))]
            verdict = verdicts[1 if replicate_of else 0]
            _score = SENTINEL  # the gate computes a score; only the coarse verdict leaves it
            self.cache[ticket.id] = CoarseVerdict(ticket_id=ticket.id, tier="confirm-b" if replicate_of else "confirm-a",
                                                  verdict=verdict, queries_left=10 - len(self.queries))
        if ticket.id in self.crash_after_gate:
            self.crash_after_gate.discard(ticket.id)
            raise Crash(ticket.id)
        return self.cache[ticket.id]

    def milestone(self, run_id: str) -> None:
        self.ended.append("milestone")

    def report(self, run_id: str, stop_reason: str) -> None:
        self.ended.append(f"report: {stop_reason}")


def _graph(services: StubFactoryServices, log: Log, tmp_path: Path, tickets: int = 20) -> Any:
    policy = load_budget_policy()
    seeds = itertools.count(100)
    deps = LoopDeps(
        services=services, judge=Judge(log), sink=log, usage=LLMUsage(),
        proposer=get_proposer("rules", sink=log, usage=LLMUsage(), default_budget=Budget(device_seconds=60, epochs=2),
                              caps=Budget(device_seconds=120, epochs=10)),
        caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=tickets, llm_tokens=0),
        check=lambda t: ticket_problems(t, policy, "demo"), make_seed=lambda: next(seeds))
    return build_graph(deps, tmp_path / "state.sqlite")


def _services() -> StubFactoryServices:
    return StubFactoryServices(
        dev={"optim.lr": "dev_win", "epochs": "dev_loss", "grad_accum": "dev_win", "batch_size": "failed"},
        gate={"optim.lr": [Verdict.WIN, Verdict.WIN], "grad_accum": [Verdict.NO_WIN]})


def _summary(state: FactoryState) -> list[tuple[str, str]]:
    return [(d["ticket_id"], d["decision"]) for d in state["decisions"]]


def test_a_whole_loop_promotes_only_after_a_replicate_win(audit_log: Log, tmp_path: Path) -> None:
    services = _services()
    state = run_loop(_graph(services, audit_log, tmp_path), "run1")
    assert _summary(state) == [("run1-t001", "replicate"), ("run1-t001", "promote"), ("run1-t003", "reject")]
    assert services.queries == ["run1-t001", "run1-t001-rep", "run1-t003"]  # dev losses spend no query
    assert [h["verdict"] for h in state["history"]] == ["WIN", "WIN", "DEV_LOSS", "NO_WIN", "FAILED"]
    assert services.ended == ["milestone", "report: the proposer has nothing left to try"]
    assert state["tickets_run"] == 5 and state["device_seconds"] == 50


def test_the_ticket_budget_stops_the_loop(audit_log: Log, tmp_path: Path) -> None:
    services = _services()
    state = run_loop(_graph(services, audit_log, tmp_path, tickets=2), "run2")
    assert state["tickets_run"] == 2 and services.ended[-1] == "report: budget: 2 tickets run"


def _checkpointed_states(graph: Any, run_id: str) -> list[dict[str, Any]]:
    return [snap.values for snap in graph.get_state_history({"configurable": {"thread_id": run_id}})]


def test_graph_state_and_audit_hold_no_score(audit_log: Log, tmp_path: Path) -> None:
    graph = _graph(_services(), audit_log, tmp_path)
    run_loop(graph, "run3")
    states = _checkpointed_states(graph, "run3")
    assert len(states) > 10
    text = repr(states) + repr(audit_log.records())
    assert str(SENTINEL) not in text and "score" not in text
    floats = {k for s in states for k, v in s.items() if isinstance(v, float)}
    assert floats <= {"started_at", "device_seconds"}


def test_resume_after_a_crash_mid_ticket_loses_none_and_repeats_none(audit_log: Log, tmp_path: Path) -> None:
    services = _services()
    services.crash_in_run = {"run4-t003"}
    graph = _graph(services, audit_log, tmp_path)
    with pytest.raises(Crash):
        run_loop(graph, "run4")
    state = run_loop(_graph(services, audit_log, tmp_path), "run4", resume=True)
    assert services.runs.count("run4-t001") == 1 and services.runs.count("run4-t002") == 1
    assert services.runs.count("run4-t003") == 2  # the crashed ticket runs again, once
    assert [h["ticket_id"] for h in state["history"]] == ["run4-t001", "run4-t001-rep", "run4-t002", "run4-t003",
                                                          "run4-t004"]


def test_resume_after_a_crash_between_verdict_and_checkpoint_spends_no_second_query(
        audit_log: Log, tmp_path: Path) -> None:
    services = _services()
    services.crash_after_gate = {"run5-t003"}
    with pytest.raises(Crash):
        run_loop(_graph(services, audit_log, tmp_path), "run5")
    state = run_loop(_graph(services, audit_log, tmp_path), "run5", resume=True)
    assert services.queries.count("run5-t003") == 1
    assert _summary(state)[-1] == ("run5-t003", "reject")


def test_a_short_run_with_an_llm_proposer_never_shows_it_a_score(keys: None, audit_log: Log, tmp_path: Path) -> None:
    """The real OpenAI SDK against the fake drives a run; a planted sentinel never reaches a prompt."""
    from tests.agents.fakes import Step, openai_server

    home = audit_log.home
    for planted in (home.vault / "confirm-a" / "scores.json", home.people_dir("run6") / "report.md"):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(f"confirm-a score {SENTINEL}")
    draft = {"kind": "config", "hypothesis": "lower lr", "change": {"optim.lr": 0.001},
             "budget": {"device_seconds": 60, "epochs": 2},
             "expected_effect": {"metric": "iou", "direction": "up", "size": 0.01}}
    services = _services()
    with openai_server([Step.call("propose_tickets", {"tickets": [draft]})]) as fake:
        usage = LLMUsage()
        proposer = get_proposer("openai:gpt-4o", sink=audit_log, usage=usage, base_url=fake.base_url,
                                default_budget=Budget(device_seconds=60, epochs=2), backoff_base_s=0.01,
                                caps=Budget(device_seconds=120, epochs=10))
        graph = _llm_graph(services, audit_log, tmp_path, proposer, usage)
        state = run_loop(graph, "run6")
    assert _summary(state) == [("run6-t001", "replicate"), ("run6-t001", "promote")]
    assert state["stop_reason"].startswith("proposer failed")  # the unscripted second ask: bounded, clean stop
    sent = b"".join(fake.received)
    assert str(SENTINEL).encode() not in sent
    assert b"people" not in sent and b"vault" not in sent  # not even the names of where it lies
    assert usage.input_tokens > 0 and audit_log.events("proposer_failed")


def _llm_graph(services: StubFactoryServices, log: Log, tmp_path: Path, proposer: Any,
                  usage: LLMUsage) -> Any:
    policy = load_budget_policy()
    seeds = itertools.count(100)
    deps = LoopDeps(services=services, judge=Judge(log), sink=log, usage=usage, proposer=proposer,
                    caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=20, llm_tokens=100_000),
                    check=lambda t: ticket_problems(t, policy, "demo"), make_seed=lambda: next(seeds))
    return build_graph(deps, tmp_path / "state-llm.sqlite")
