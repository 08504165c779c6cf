"""The judge sees no score (by type), promotes only by the coded rule, and an LLM never promotes."""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agents.judge import Decision, Judge, JudgeInput, TicketMeta, default_judge, make_reviewer, rule_decision
from agents.llm import LLMCaller, LLMUsage, make_provider
from segfactory.errors import UsageError
from segfactory.records import (
    Actor,
    Arm,
    Budget,
    CoarseVerdict,
    Direction,
    ExpectedEffect,
    Ticket,
    TicketKind,
    Verdict,
)
from tests.agents.conftest import Log
from tests.agents.fakes import Step, anthropic_server, openai_server

SCOREISH = ("score", "metric", "iou", "dice", "f1", "auc", "loss", "value")


def _leaf_types(model: type[BaseModel]) -> list[tuple[str, Any]]:
    """Every (field path, leaf annotation) reachable from ``model``."""
    found: list[tuple[str, Any]] = []

    def walk(prefix: str, annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for name, field in annotation.model_fields.items():
                walk(f"{prefix}.{name}", field.annotation)
            return
        args = typing.get_args(annotation)
        if args and (typing.get_origin(annotation) in (typing.Union, types.UnionType, tuple, list, dict)):
            for arg in args:
                walk(prefix, arg)
            return
        found.append((prefix, annotation))

    walk("JudgeInput", model)
    return found


def test_judge_input_has_no_float_and_no_score_field() -> None:
    leaves = _leaf_types(JudgeInput)
    assert leaves and not [p for p, t in leaves if t is float or t is typing.Any]
    assert not [p for p, _ in leaves if any(word in p.rsplit(".", 1)[-1].lower() for word in SCOREISH)]


def _ticket() -> Ticket:
    return Ticket(
        id="t1",
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="h",
        change={"optim.lr": 1e-3},
        budget=Budget(device_seconds=60, epochs=2),
        seed=4,
        expected_effect=ExpectedEffect(metric="iou", direction=Direction.UP, size=0.03),
    )


def _v(tid: str, tier: str, verdict: Verdict) -> CoarseVerdict:
    return CoarseVerdict(ticket_id=tid, tier=tier, verdict=verdict, queries_left=5)  # type: ignore[arg-type]


def test_a_score_cannot_be_passed_in() -> None:
    meta = TicketMeta.of(_ticket())
    with pytest.raises(ValidationError):
        JudgeInput(ticket=meta, confirm_a=_v("t1", "confirm-a", Verdict.WIN), score=0.93)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        CoarseVerdict(ticket_id="t1", tier="confirm-a", verdict=Verdict.WIN, queries_left=1, score=0.9)  # type: ignore[call-arg]
    assert "0.03" not in meta.model_dump_json()  # the expected-effect size is not judge input


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (Verdict.WIN, None, Decision.REPLICATE),
        (Verdict.WIN, Verdict.WIN, Decision.PROMOTE),
        (Verdict.WIN, Verdict.NO_WIN, Decision.REJECT),
        (Verdict.WIN, Verdict.INVALID, Decision.REJECT),
        (Verdict.WIN, Verdict.BUDGET_EXHAUSTED, Decision.ESCALATE),
        (Verdict.NO_WIN, None, Decision.REJECT),
        (Verdict.INVALID, None, Decision.REJECT),
        (Verdict.BUDGET_EXHAUSTED, None, Decision.ESCALATE),
    ],
)
def test_promotion_rule(a: Verdict, b: Verdict | None, expected: Decision) -> None:
    judged = JudgeInput(
        ticket=TicketMeta.of(_ticket()),
        confirm_a=_v("t1", "confirm-a", a),
        replicate_id="t1r" if b else None,
        confirm_b=_v("t1r", "confirm-b", b) if b else None,
    )
    assert rule_decision(judged).decision is expected


def test_verdicts_must_match_ticket_and_tier() -> None:
    with pytest.raises(ValidationError):
        JudgeInput(ticket=TicketMeta.of(_ticket()), confirm_a=_v("other", "confirm-a", Verdict.WIN))
    with pytest.raises(ValidationError):  # a confirm-a verdict cannot stand in for the replicate
        JudgeInput(
            ticket=TicketMeta.of(_ticket()),
            confirm_a=_v("t1", "confirm-a", Verdict.WIN),
            replicate_id="t1",
            confirm_b=_v("t1", "confirm-a", Verdict.WIN),
        )  # type: ignore[arg-type]


def _promotable() -> JudgeInput:
    return JudgeInput(
        ticket=TicketMeta.of(_ticket()),
        confirm_a=_v("t1", "confirm-a", Verdict.WIN),
        replicate_id="t1r",
        confirm_b=_v("t1r", "confirm-b", Verdict.WIN),
    )


def _reviewer(fake_url: str, flavour: str, log: Log) -> LLMCaller:
    name = "openai:gpt-4o" if flavour == "openai" else "anthropic:claude-sonnet-4-6"
    provider = make_provider(name, log, Actor.JUDGE, base_url=fake_url, timeout_s=5)
    return LLMCaller(provider, log, LLMUsage(), Actor.JUDGE, backoff_base_s=0.01)


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_llm_judge_may_reject_or_escalate_but_never_promote(flavour: str, keys: None, audit_log: Log) -> None:
    server = openai_server if flavour == "openai" else anthropic_server
    promote = Step.call("review", {"decision": "promote", "reason": "looks great"})
    script = [
        Step.call("review", {"decision": "reject", "reason": "change does not match hypothesis"}),
        Step.call("review", {"decision": "agree", "reason": "fine"}),
        promote,
        promote,
        promote,
        promote,
    ]
    rejected_input = JudgeInput(
        ticket=TicketMeta.of(_ticket()), confirm_a=_v("t1", "confirm-a", Verdict.NO_WIN)
    )
    with server(script) as fake:
        judge = Judge(audit_log, reviewer=_reviewer(fake.base_url, flavour, audit_log))
        first = judge.decide(_promotable())
        assert (first.decision, first.by) == (Decision.REJECT, "llm")
        assert judge.decide(_promotable()).decision is Decision.PROMOTE  # agree: the rule stands
        assert judge.decide(rejected_input).decision is Decision.REJECT  # not asked: nothing to promote
        # an LLM answering "promote" is schema-invalid every time: the judge escalates instead
        assert judge.decide(_promotable()).decision is Decision.ESCALATE
    assert len(fake.received) == 6
    assert len(audit_log.events("judge_decision")) == 4


def test_the_default_judge_follows_the_proposer_and_a_bad_spec_names_the_known_ones() -> None:
    assert default_judge("rules") == "rules"
    assert default_judge("openai:gpt-4o") == "llm:openai:gpt-4o"
    assert default_judge("local:http://127.0.0.1:9/v1#m") == "llm:local:http://127.0.0.1:9/v1#m"
    for bad in ("openai:gpt-4o", "llm:gpt:4", "llm:openai", "LLM"):
        with pytest.raises(
            UsageError, match=f"judge '{bad}' is not registered; known: rules, llm:anthropic:MODEL"
        ):
            make_reviewer(bad, sink=_NoWrites(), usage=LLMUsage(), run_id="r1")
    assert make_reviewer("rules", sink=_NoWrites(), usage=LLMUsage(), run_id="r1") is None


class _NoWrites:
    def append(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no audit record expected")

    def put_blob(self, data: bytes) -> str:
        raise AssertionError("no blob expected")


def test_make_reviewer_builds_an_audited_judge_that_rejects_and_cannot_promote(
    keys: None, audit_log: Log
) -> None:
    usage = LLMUsage()
    script = [
        Step.call("review", {"decision": "reject", "reason": "the change does not test the hypothesis"}),
        *[Step.call("review", {"decision": "promote", "reason": "promote it"})] * 3,
    ]
    with openai_server(script) as fake:
        reviewer = make_reviewer(
            "llm:openai:gpt-4o", sink=audit_log, usage=usage, run_id="r9", base_url=fake.base_url
        )
        assert reviewer is not None
        reviewer.backoff_base_s = 0.01
        judge = Judge(audit_log, reviewer=reviewer, run_id="r9")
        assert judge.decide(_promotable()).decision is Decision.REJECT
        escalated = judge.decide(
            _promotable()
        )  # "promote" is no answer it may give: escalated, never promoted
    assert (escalated.decision, escalated.by) == (Decision.ESCALATE, "llm")
    attempts = [r for r in audit_log.records() if r.event == "llm_attempt"]
    assert attempts and {(r.actor, r.run_id) for r in attempts} == {("judge", "r9")}
    assert usage.input_tokens > 0  # the reviewer's tokens count against the run's meter
    assert [r.run_id for r in audit_log.records() if r.event == "judge_decision"] == ["r9", "r9"]


@pytest.mark.parametrize(
    ("proposer", "judge", "recorded"),
    [
        ("rules", None, "rules"),
        ("openai:gpt-4o", None, "llm:openai:gpt-4o"),
        ("openai:gpt-4o", "rules", "rules"),
        ("rules", "llm:anthropic:claude-x", "llm:anthropic:claude-x"),
    ],
)
def test_a_run_records_its_judge_so_a_resume_keeps_it(
    proposer: str, judge: str | None, recorded: str, tmp_path: Any
) -> None:
    from agents.run import RunRequest, _run_record
    from agents.run_policy import load_run_defaults
    from segfactory.budgets import RunCaps
    from segfactory.home import Home

    home = Home(tmp_path / "home")
    caps = RunCaps(wall_seconds=60, device_seconds=60, tickets=1, llm_tokens=0)
    defaults = load_run_defaults("demo")
    req = RunRequest(
        home=home, profile="demo", proposer=proposer, judge=judge, code_agent=True, concurrency=2
    )
    record = _run_record(home, req, "r1", caps, "sha", defaults)
    assert (record.judge, record.code_agent) == (recorded, True)
    assert (record.base_config, record.concurrency) == ("configs/run-demo.yaml", 2)
    resumed = _run_record(
        home, RunRequest(home=home, profile="demo", resume="r1"), "r1", caps, "sha", defaults
    )
    assert (resumed.judge, resumed.code_agent, resumed.concurrency) == (recorded, True, 2)


@pytest.mark.parametrize(("judge", "code_agent"), [("llm:openai:gpt-4o", True), ("rules", False)])
def test_the_run_loop_wires_the_recorded_judge_and_code_arm(
    judge: str, code_agent: bool, keys: None, audit_log: Log, tmp_path: Any
) -> None:
    from agents._run_loop import _deps
    from agents.code_arm import CodeArmProposer
    from agents.run import RunRequest
    from agents.run_policy import load_run_defaults
    from segfactory.budgets import RunCaps
    from segfactory.layout import RunRecord
    from tests.agents._stubs import make_services

    home = audit_log.home
    record = RunRecord(
        run_id="r1",
        profile="demo",
        proposer="openai:gpt-4o",
        backend="bwrap",
        judge=judge,
        code_agent=code_agent,
        caps=RunCaps(wall_seconds=60, device_seconds=60, tickets=1, llm_tokens=0),
        win_rule_sha256="sha",
        started_at=0.0,
        user="test",
    )
    services = make_services()
    services.check = lambda ticket: []  # type: ignore[attr-defined]  # the host's repeat check, not under test
    deps = _deps(
        RunRequest(home=home, profile="demo"),
        record,
        services,
        audit_log,
        load_run_defaults("demo"),
        LLMUsage(),
    )
    reviewer = deps.judge.reviewer
    assert (reviewer is not None) == (judge != "rules") and deps.judge.run_id == "r1"
    if reviewer is not None:
        assert (reviewer.actor, reviewer.provider.model, reviewer.usage) == (
            Actor.JUDGE,
            "gpt-4o",
            deps.usage,
        )
    assert isinstance(deps.proposer, CodeArmProposer) == code_agent
    assert (deps.device_left_share, deps.plateau_tickets) == (0.5, 8)  # a run's own stop rules
    filled = _deps(
        RunRequest(home=home, profile="demo"),
        record.model_copy(update={"fill_budget": True}),
        services,
        audit_log,
        load_run_defaults("demo"),
        LLMUsage(),
    )
    assert (filled.device_left_share, filled.plateau_tickets) == (0.0, 0)  # a compare arm: only the budget
