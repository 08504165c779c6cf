"""The factory loop (LangGraph + SQLite checkpoints) against stub runner/gate services.

``tests/agents/_stubs.py`` holds ``StubFactoryServices``, a test-only stand-in for the runner
and the gate (built in another issue).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.graph import FactoryState, LoopDeps, build_graph, run_loop
from agents.judge import Judge
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.validate import ticket_problems
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.records import (
    Arm,
    Budget,
    CoarseVerdict,
    Direction,
    ExpectedEffect,
    Ticket,
    TicketKind,
    Verdict,
)
from tests.agents._stubs import SENTINEL, Crash, StubFactoryServices, make_graph, make_services
from tests.agents.conftest import Log


def _summary(state: FactoryState) -> list[tuple[str, str]]:
    return [(d.ticket_id, d.decision) for d in state.decisions]


def test_a_whole_loop_promotes_only_after_a_replicate_win(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    state = run_loop(make_graph(services, audit_log, tmp_path), "run1")
    assert _summary(state) == [("run1-t001", "replicate"), ("run1-t001", "promote"), ("run1-t006", "reject")]
    assert services.queries == ["run1-t001", "run1-t001-rep", "run1-t006"]  # dev losses spend no query
    # the promotion re-analysed the new best: the tickets queued for the old one (t002-t004) were dropped
    assert [r.first_ticket for r in state.rounds] == [1, 3]
    assert [h.verdict for h in state.history] == ["WIN", "WIN", "DEV_LOSS", "NO_WIN", "FAILED"]
    assert services.ended == ["milestone", "report: the proposer has nothing left to try"]
    assert state.tickets_run == 5 and state.device_seconds == 50


def test_the_ticket_budget_stops_the_loop(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    state = run_loop(make_graph(services, audit_log, tmp_path, tickets=2), "run2")
    assert state.tickets_run == 2 and services.ended[-1] == "report: budget: 2 tickets run"


def test_the_written_plateau_rule_stops_a_run_that_stopped_improving(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    services.dev = {k: "dev_loss" for k in services.dev}  # nothing ever beats the best
    deps = _deps_of(services, audit_log, plateau_tickets=3)
    state = run_loop(build_graph(deps, tmp_path / "plateau.sqlite"), "run9")
    assert state.tickets_run == 3 and state.since_dev_win == 3
    assert state.stop_reason.startswith("plateau: 3 tickets in a row without a dev win")


@pytest.mark.parametrize(
    ("share", "tickets", "reason"),
    [
        (0.5, 2, "budget: device time 24 s: 4 s left, under 0.5 of a ticket at the average 10 s"),
        (0.0, 3, "budget: device time 24 s spent"),  # a compare arm: a ticket starts while any time is left
    ],
)
def test_the_device_budget_stops_by_the_left_share_rule(
    share: float, tickets: int, reason: str, audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    services.dev = {k: "dev_loss" for k in services.dev}  # every stub ticket spends 10 device-s
    deps = _deps_of(services, audit_log, device_left_share=share)
    deps.caps = RunCaps(wall_seconds=600, device_seconds=24, tickets=20, llm_tokens=0)
    state = run_loop(build_graph(deps, tmp_path / "share.sqlite"), "run10")
    assert state.tickets_run == tickets and state.stop_reason == reason


def test_a_replicate_owed_to_a_confirm_win_runs_past_the_device_budget(
    audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    deps = _deps_of(services, audit_log)
    deps.caps = RunCaps(
        wall_seconds=600, device_seconds=10, tickets=20, llm_tokens=0
    )  # one stub ticket's worth
    state = run_loop(build_graph(deps, tmp_path / "owed.sqlite"), "run11")
    assert services.queries == ["run11-t001", "run11-t001-rep"]  # the confirm-a WIN got its replicate
    assert _summary(state) == [("run11-t001", "replicate"), ("run11-t001", "promote")]
    assert state.tickets_run == 2 and state.stop_reason == "budget: device time 10 s spent"


def test_past_the_device_budget_an_owed_replicate_trains_alone_not_beside_a_fresh_ticket(
    audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    deps = _deps_of(services, audit_log)
    deps.concurrency = 2  # two at a time: the first batch alone spends the device budget
    deps.caps = RunCaps(wall_seconds=600, device_seconds=10, tickets=20, llm_tokens=0)
    state = run_loop(build_graph(deps, tmp_path / "owed2.sqlite"), "run12")
    assert services.runs == ["run12-t001", "run12-t002", "run12-t001-rep"], services.runs
    assert state.tickets_run == 3 and state.stop_reason == "budget: device time 10 s spent"


def _deps_of(services: StubFactoryServices, log: Log, **kw: Any) -> LoopDeps:
    policy = load_budget_policy()
    seeds = itertools.count(100)
    return LoopDeps(
        services=services,
        judge=Judge(log),
        sink=log,
        usage=LLMUsage(),
        proposer=get_proposer(
            "rules",
            sink=log,
            usage=LLMUsage(),
            default_budget=Budget(device_seconds=60, epochs=2),
            caps=Budget(device_seconds=120, epochs=10),
        ),
        caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=20, llm_tokens=0),
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_seed=lambda: next(seeds),
        **kw,
    )


def _checkpointed_states(graph: Any, run_id: str) -> list[dict[str, object]]:
    return [snap.values for snap in graph.get_state_history({"configurable": {"thread_id": run_id}})]


class _Recording:
    """A proposer that records, as JSON, every context it is shown (then delegates)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.seen = inner, inner.name, []  # type: ignore[var-annotated]

    def propose(self, context: Any, n: int, rejected: Any = ()) -> Any:
        self.seen.append(context.model_dump_json())
        return self.inner.propose(context, n, rejected)


def test_no_score_reaches_the_state_the_audit_the_proposer_or_the_judge(
    audit_log: Log, tmp_path: Path
) -> None:
    """The stub host and gate write a sentinel score where the real ones write scores (people/ and
    the vault); it must reach no checkpoint, audit record, proposer context or judge input."""
    services = make_services(home=tmp_path / "home")
    deps = _deps_of(services, audit_log)
    deps.proposer = _Recording(deps.proposer)
    judged: list[str] = []
    decide = deps.judge.decide
    deps.judge.decide = lambda j: (judged.append(j.model_dump_json()), decide(j))[1]  # type: ignore[method-assign]
    graph = build_graph(deps, tmp_path / "state.sqlite")
    run_loop(graph, "run3")
    planted = [
        tmp_path / "home" / "runs" / "people" / "dev_comparisons.jsonl",
        tmp_path / "home" / "vault" / "ledger-scores.jsonl",
    ]
    assert all(str(SENTINEL) in p.read_text() for p in planted)  # the score is really there to leak
    states = _checkpointed_states(graph, "run3")
    assert len(states) > 10 and deps.proposer.seen and judged
    for name, text in (
        ("checkpoints", repr(states)),
        ("audit", repr(audit_log.records())),
        ("proposer contexts", "".join(deps.proposer.seen)),
        ("judge inputs", "".join(judged)),
    ):
        assert str(SENTINEL) not in text, f"the sentinel score reached the {name}"
    floats = {k for s in states for k, v in s.items() if isinstance(v, float)}
    assert floats <= {"started_at", "device_seconds"}


def test_resume_after_a_crash_mid_ticket_loses_none_and_repeats_none(audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    services.crash_in_run = {"run4-t006"}
    graph = make_graph(services, audit_log, tmp_path)
    with pytest.raises(Crash):
        run_loop(graph, "run4")
    state = run_loop(make_graph(services, audit_log, tmp_path), "run4", resume=True)
    assert services.runs.count("run4-t001") == 1 and services.runs.count("run4-t005") == 1
    assert services.runs.count("run4-t006") == 2  # the crashed ticket runs again, once
    assert [h.ticket_id for h in state.history] == [
        "run4-t001",
        "run4-t001-rep",
        "run4-t005",
        "run4-t006",
        "run4-t007",
    ]


def test_resume_after_a_crash_between_verdict_and_checkpoint_spends_no_second_query(
    audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    services.crash_after_gate = {"run5-t006"}
    with pytest.raises(Crash):
        run_loop(make_graph(services, audit_log, tmp_path), "run5")
    state = run_loop(make_graph(services, audit_log, tmp_path), "run5", resume=True)
    assert services.queries.count("run5-t006") == 1
    assert _summary(state)[-1] == ("run5-t006", "reject")


@pytest.mark.slow
def test_a_short_run_with_an_llm_proposer_never_shows_it_a_score(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    """The real OpenAI SDK against the fake drives a run; a planted sentinel never reaches a prompt."""
    from tests.agents.fakes import Step, openai_server

    home = audit_log.home
    for planted in (home.vault / "confirm-a" / "scores.json", home.people_dir("run6") / "report.md"):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(f"confirm-a score {SENTINEL}")
    draft = {
        "kind": "config",
        "hypothesis": "lower lr",
        "change": {"optim.lr": 0.001},
        "budget": {"device_seconds": 60, "epochs": 2},
        "expected_effect": {"metric": "iou", "direction": "up", "size": 0.01},
    }
    services = make_services()
    with openai_server([Step.call("propose_tickets", {"tickets": [draft]})]) as fake:
        usage = LLMUsage()
        proposer = get_proposer(
            "openai:gpt-4o",
            sink=audit_log,
            usage=usage,
            base_url=fake.base_url,
            default_budget=Budget(device_seconds=60, epochs=2),
            backoff_base_s=0.01,
            caps=Budget(device_seconds=120, epochs=10),
        )
        graph = _llm_graph(services, audit_log, tmp_path, proposer, usage)
        state = run_loop(graph, "run6")
    assert _summary(state) == [("run6-t001", "replicate"), ("run6-t001", "promote")]
    assert state.stop_reason.startswith("proposer failed")  # the unscripted second ask: bounded, clean stop
    sent = b"".join(fake.received)
    assert str(SENTINEL).encode() not in sent
    assert b"people" not in sent and b"vault" not in sent  # not even the names of where it lies
    assert usage.input_tokens > 0 and audit_log.events("proposer_failed")


def _llm_graph(
    services: StubFactoryServices, log: Log, tmp_path: Path, proposer: Any, usage: LLMUsage
) -> Any:
    policy = load_budget_policy()
    seeds = itertools.count(100)
    deps = LoopDeps(
        services=services,
        judge=Judge(log),
        sink=log,
        usage=usage,
        proposer=proposer,
        caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=20, llm_tokens=100_000),
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_seed=lambda: next(seeds),
    )
    return build_graph(deps, tmp_path / "state-llm.sqlite")


REPO = Path(__file__).resolve().parents[2]


def _subprocess_run(
    home: Path, workdir: Path, run_id: str, kill_at: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.agents._stubs", str(home), str(workdir), run_id, kill_at, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["run:k1-t006", "gate:k1-t006"])
def test_resume_after_kill_9(kill_at: str, tmp_path: Path) -> None:
    """A real SIGKILL mid-ticket, or between the gate's answer and the checkpoint, then --resume."""
    home = tmp_path / "home"
    home.mkdir()
    killed = _subprocess_run(home, tmp_path, "k1", kill_at)
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = _subprocess_run(home, tmp_path, "k1", "-", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    result = json.loads(resumed.stdout)
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    # after the promotion the new best is analysed again: t002-t004 were dropped, t005-t007 proposed
    assert result["history"] == ["k1-t001", "k1-t001-rep", "k1-t005", "k1-t006", "k1-t007"]  # none lost
    assert result["revived"] == ["JudgeDecision", "Round", "VerdictEntry"]  # records, not dicts
    assert ledger["queries"] == ["k1-t001", "k1-t001-rep", "k1-t006"]  # no query spent twice
    assert ledger["runs"].count("k1-t001") == 1 and ledger["runs"].count("k1-t005") == 1
    assert ledger["runs"].count("k1-t006") == (2 if kill_at.startswith("run") else 1)
    assert ledger["ended"] == ["milestone", "report: the proposer has nothing left to try"]


def test_a_checkpoint_revives_the_states_records_and_no_other_callable(tmp_path: Path) -> None:
    """The checkpointer is strict: the state's own types come back as themselves, and a checkpoint
    that names any other constructor (a tampered ``state.sqlite``) yields inert data, not a call."""
    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS

    from agents.graph import checkpoint_serde
    from agents.state import Held

    serde = checkpoint_serde()
    verdict = CoarseVerdict(ticket_id="t1", tier="confirm-a", verdict=Verdict.WIN, queries_left=3)
    ticket = Ticket(
        id="t1",
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="h",
        change={"optim.lr": 0.004},
        budget=Budget(device_seconds=60, epochs=2),
        expected_effect=ExpectedEffect(metric="dice", direction=Direction.UP, size=0.01),
        seed=3,
    )
    held = Held(ticket=ticket, confirm_a=verdict, pending="promote")
    assert serde.loads_typed(serde.dumps_typed(held)) == held
    marker = tmp_path / "ran"
    evil = ormsgpack.packb(
        ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [f"touch {marker}"])))
    )
    assert serde.loads_typed(("msgpack", evil)) == [f"touch {marker}"]
    assert not marker.exists()
