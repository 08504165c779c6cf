"""Drafts become validated tickets; invalid ones are recorded and the proposer asked again, bounded."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.context import ProposerContext
from agents.llm import MAX_ATTACHMENT_BYTES, LLMUsage
from agents.proposer import MAX_PROPOSAL_ROUNDS, get_proposer, propose_valid
from agents.validate import ticket_problems
from segfactory.budgets import load_budget_policy
from segfactory.errors import DataError, LimitExceeded
from segfactory.records import Arm, Budget, Ticket
from tests.agents.conftest import Log
from tests.agents.fakes import Step, anthropic_server, openai_server

CAPS = Budget(device_seconds=120, epochs=10)


def _draft(device_seconds: float, key: str = "optim.lr") -> dict[str, object]:
    return {
        "kind": "config",
        "hypothesis": f"try {key}",
        "change": {key: 0.001},
        "budget": {"device_seconds": device_seconds, "epochs": 2},
        "expected_effect": {"metric": "iou", "direction": "up", "size": 0.01},
    }


def _check(ticket: Ticket) -> list[str]:
    return ticket_problems(ticket, load_budget_policy(), "demo")


def _ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"t{next(counter):03d}"


def test_invalid_tickets_are_recorded_and_the_llm_asked_again(
    keys: None, audit_log: Log, context: ProposerContext
) -> None:
    over = {"tickets": [_draft(10_000)]}
    script = [Step.call("propose_tickets", over), Step.call("propose_tickets", {"tickets": [_draft(60)]})]
    with openai_server(script) as fake:
        proposer = get_proposer(
            "openai:gpt-4o",
            sink=audit_log,
            usage=LLMUsage(),
            default_budget=CAPS,
            caps=CAPS,
            base_url=fake.base_url,
        )
        tickets = propose_valid(
            proposer,
            context,
            1,
            check=_check,
            make_id=_ids(),
            make_seed=lambda: 7,
            sink=audit_log,
        )
    assert [t.id for t in tickets] == ["t002"] and tickets[0].arm is Arm.AGENT and tickets[0].seed == 7
    invalid = audit_log.events("ticket_invalid")
    assert len(invalid) == 1 and "per-ticket cap" in invalid[0]["reasons"][0]
    assert b"per-ticket cap" in fake.received[1]  # the reason went back to the model
    assert len(audit_log.events("ticket_proposed")) == 1


def test_an_llm_failing_on_a_re_ask_keeps_the_tickets_it_already_gave(
    keys: None, audit_log: Log, context: ProposerContext
) -> None:
    """One valid and one invalid draft, then the re-ask fails on every retry: the valid ticket is
    kept (it trains), and the failure is recorded; with nothing valid it would stop the run."""
    from agents.llm import MAX_LLM_ATTEMPTS, LLMFailed

    first = {"tickets": [_draft(60), _draft(10_000, "optim.weight_decay")]}
    failing = [Step.error(503)] * MAX_LLM_ATTEMPTS

    def propose(base_url: str) -> list[Ticket]:
        proposer = get_proposer(
            "openai:gpt-4o",
            sink=audit_log,
            usage=LLMUsage(),
            default_budget=CAPS,
            caps=CAPS,
            base_url=base_url,
            backoff_base_s=0.01,
        )
        return propose_valid(
            proposer, context, 2, check=_check, make_id=_ids(), make_seed=lambda: 7, sink=audit_log
        )

    with openai_server([Step.call("propose_tickets", first), *failing]) as fake:
        tickets = propose(fake.base_url)
    assert [t.id for t in tickets] == ["t001"]
    (failed,) = audit_log.events("proposer_failed")
    assert failed["kept"] == ["t001"] and failed["round"] == 2
    with openai_server(failing) as fake:
        with pytest.raises(LLMFailed):
            propose(fake.base_url)


def test_re_asks_are_bounded(keys: None, audit_log: Log, context: ProposerContext) -> None:
    script = [
        Step.call("propose_tickets", {"tickets": [_draft(10_000 + i)]})
        for i in range(MAX_PROPOSAL_ROUNDS + 2)
    ]
    with anthropic_server(script) as fake:
        proposer = get_proposer(
            "anthropic:claude-sonnet-4-6",
            sink=audit_log,
            usage=LLMUsage(),
            default_budget=CAPS,
            caps=CAPS,
            base_url=fake.base_url,
        )
        tickets = propose_valid(
            proposer,
            context,
            1,
            check=_check,
            make_id=_ids(),
            make_seed=lambda: 1,
            sink=audit_log,
        )
    assert tickets == [] and len(fake.received) == MAX_PROPOSAL_ROUNDS
    assert len(audit_log.events("ticket_invalid")) == MAX_PROPOSAL_ROUNDS


def test_rules_tickets_pass_validation(audit_log: Log, context: ProposerContext) -> None:
    from agents.context import DevAnalysis, build_context
    from tests.agents.conftest import recommendation

    analysis = DevAnalysis(
        summary="s",
        recommendations=(
            recommendation("r1", "optim.lr", 0.001),
            recommendation("r2", "test_split", "confirm-a"),
        ),
    )
    proposer = get_proposer(
        "rules",
        sink=audit_log,
        usage=LLMUsage(),
        default_budget=Budget(device_seconds=60, epochs=2),
        caps=CAPS,
    )
    tickets = propose_valid(
        proposer,
        build_context(analysis, []),
        5,
        check=_check,
        make_id=_ids(),
        make_seed=lambda: 3,
        sink=audit_log,
    )
    assert [t.change for t in tickets] == [{"optim.lr": 0.001}]
    assert len(audit_log.events("ticket_invalid")) == 1


def _png(path: Path, size: int) -> Path:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * (size - 8))
    return path


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_attachments_are_sent_or_nothing_is(
    flavour: str, keys: None, audit_log: Log, tmp_path: Path, context: ProposerContext
) -> None:
    server, name = (
        (openai_server, "openai:gpt-4o")
        if flavour == "openai"
        else (anthropic_server, "anthropic:claude-sonnet-4-6")
    )
    crop = _png(tmp_path / "crop.png", 64)
    cases = [
        ([tmp_path / "missing.png"], DataError),
        ([_png(tmp_path / "big.png", MAX_ATTACHMENT_BYTES + 1)], LimitExceeded),
    ]
    with server([Step.call("propose_tickets", {"tickets": [_draft(60)]})]) as fake:
        for attachments, error in cases:
            proposer = get_proposer(
                name,
                sink=audit_log,
                usage=LLMUsage(),
                default_budget=CAPS,
                caps=CAPS,
                base_url=fake.base_url,
                attachments=attachments,
            )
            with pytest.raises(error, match="not sent"):
                proposer.propose(context, 1)
        assert fake.received == []  # a prompt is never sent without its attachment
        proposer = get_proposer(
            name,
            sink=audit_log,
            usage=LLMUsage(),
            default_budget=CAPS,
            caps=CAPS,
            base_url=fake.base_url,
            attachments=[crop],
        )
        assert len(proposer.propose(context, 1)) == 1
    import base64

    assert base64.b64encode(crop.read_bytes()) in fake.received[0]


def test_the_real_audit_log_satisfies_the_agents_audit_sink(audit_log: Log) -> None:
    from agents import AuditSink

    assert isinstance(audit_log.log, AuditSink)
