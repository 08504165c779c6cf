"""An escalation through the whole loop: the LLM reviewer escalates, the run holds the ticket, a
person answers from another connection (as the console and the CLI do), and the run carries on.

The reviewer is ``make_reviewer("llm:openai:...")`` on the real OpenAI SDK against the fake
OpenAI server; the runner and gate are the graph tests' stubs.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from agents.approvals import ApprovalQueue
from agents.graph import LoopDeps, build_graph, run_loop
from agents.judge import Judge, make_reviewer
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.validate import ticket_problems
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.records import Budget, Ticket
from tests.agents._stubs import StubFactoryServices, make_services
from tests.agents.conftest import Log
from tests.agents.fakes import Step, openai_server

RUN = "esc1"


def _graph(
    services: StubFactoryServices, log: Log, tmp_path: Path, base_url: str, queue: ApprovalQueue
) -> object:
    policy, seeds, usage = load_budget_policy(), itertools.count(100), LLMUsage()
    reviewer = make_reviewer("llm:openai:gpt-4o", sink=log, usage=usage, run_id=RUN, base_url=base_url)
    assert reviewer is not None
    deps = LoopDeps(
        services=services,
        judge=Judge(log, reviewer=reviewer, run_id=RUN),
        sink=log,
        usage=usage,
        proposer=get_proposer(
            "rules",
            sink=log,
            usage=usage,
            default_budget=Budget(device_seconds=60, epochs=2),
            caps=Budget(device_seconds=120, epochs=10),
        ),
        caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=20, llm_tokens=0),
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_seed=lambda: next(seeds),
        approvals=queue,
    )
    return build_graph(deps, tmp_path / "state.sqlite")


def test_an_escalated_replicate_is_held_until_a_person_approves_it(
    keys: None, audit_log: Log, tmp_path: Path
) -> None:
    services = make_services()
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)
    person = ApprovalQueue(tmp_path / "state.sqlite", audit_log)  # the console's own connection

    def person_answers_meanwhile(ticket: Ticket) -> None:
        pending = person.escalations("pending")
        if pending and not ticket.id.endswith("-rep"):
            assert f"{pending[0].ticket.id}-rep" not in services.runs  # held: no replicate before the answer
            person.decide(pending[0].id, approve=True, by="alice", reason="the slice gain is the point")

    services.on_run = person_answers_meanwhile
    script = [
        Step.call("review", {"decision": "escalate", "reason": "one slice carries the whole gain"}),
        Step.call("review", {"decision": "agree", "reason": "both WINs stand"}),
    ]
    with openai_server(script) as fake:
        state = run_loop(_graph(services, audit_log, tmp_path, fake.base_url, queue), RUN)
    first = f"{RUN}-t001"
    [item] = queue.escalations()
    assert (item.id, item.status, item.pending, item.decided_by) == (
        f"{first}-esc",
        "approved",
        "replicate",
        "alice",
    )
    assert services.runs.count(f"{first}-rep") == 1  # the held replicate ran once, after the answer
    assert services.promoted == [first]  # and its confirm-b WIN promoted by the coded rule, reviewer agreeing
    decisions = [(d.ticket_id, d.decision, d.by) for d in state.decisions if d.ticket_id == first]
    assert decisions == [(first, "escalate", "llm"), (first, "replicate", "rule"), (first, "promote", "rule")]
    assert len(fake.received) == 2
    [held] = audit_log.events("ticket_held")
    assert held["escalation"] == item.id


def test_a_denied_escalation_never_promotes(keys: None, audit_log: Log, tmp_path: Path) -> None:
    services = make_services()
    queue = ApprovalQueue(tmp_path / "state.sqlite", audit_log)

    def person_denies(ticket: Ticket) -> None:
        for item in queue.escalations("pending"):
            queue.decide(item.id, approve=False, by="bob", reason="seed noise")

    services.on_run = person_denies
    script = [Step.call("review", {"decision": "escalate", "reason": "looks like seed noise"})]
    with openai_server(script) as fake:
        state = run_loop(_graph(services, audit_log, tmp_path, fake.base_url, queue), RUN)
    first = f"{RUN}-t001"
    assert services.promoted == [] and f"{first}-rep" not in services.runs
    assert (first, "reject") in [(d.ticket_id, d.decision) for d in state.decisions]
    assert len(fake.received) == 1
