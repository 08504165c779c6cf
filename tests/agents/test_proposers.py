"""Proposer backends: one contract over rules and every LLM provider (against the fake servers).

The LLM providers run the official SDKs against FastAPI fakes on loopback speaking the real
wire formats; every byte the fake received must hash to an audit blob.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from agents.context import ProposerContext
from agents.llm import MAX_LLM_ATTEMPTS, LLMFailed, LLMUsage
from agents.proposer import KNOWN_PROPOSERS, Proposer, get_proposer
from segfactory.errors import UsageError
from segfactory.records import Budget, TicketKind
from tests.agents.conftest import Log
from tests.agents.fakes import FakeLLMServer, Step, anthropic_server, openai_server

DEFAULT = Budget(device_seconds=60, epochs=3)
CAPS = Budget(device_seconds=120, epochs=10)
GOOD = {
    "tickets": [
        {
            "kind": "config",
            "hypothesis": "a lower learning rate helps small voids",
            "change": {"optim.lr": 0.001},
            "budget": {"device_seconds": 60, "epochs": 3},
            "expected_effect": {"metric": "iou", "slice": "small voids", "direction": "up", "size": 0.02},
            "evidence": ["recommendation:r1"],
        }
    ]
}
LLM_BACKENDS = {
    "openai": ("openai:gpt-4o-mini", openai_server),
    "anthropic": ("anthropic:claude-sonnet-4-6", anthropic_server),
    "local": ("local:{url}#qwen2.5", openai_server),
}
Fake = Callable[[list[Step]], AbstractContextManager[FakeLLMServer]]


def _make(
    name: str, fake: FakeLLMServer | None, log: Log, usage: LLMUsage | None = None, **kw: Any
) -> Proposer:
    base_url = fake.base_url if fake else None
    return get_proposer(
        name.format(url=base_url),
        sink=log,
        usage=usage or LLMUsage(),
        default_budget=DEFAULT,
        caps=CAPS,
        base_url=base_url,
        backoff_base_s=0.01,
        timeout_s=kw.pop("timeout_s", 5),
        **kw,
    )


@pytest.fixture(params=["rules", *LLM_BACKENDS])
def backend(request: pytest.FixtureRequest, keys: None, audit_log: Log) -> Iterator[tuple[Proposer, Log]]:
    """Each backend, scripted (LLMs) to return one good ticket."""
    if request.param == "rules":
        yield _make("rules", None, audit_log), audit_log
        return
    name, server = LLM_BACKENDS[request.param]
    with server([Step.call("propose_tickets", GOOD)]) as fake:
        yield _make(name, fake, audit_log), audit_log


class TestProposerContract:
    """What every proposer guarantees, rules or LLM."""

    def test_returns_at_most_n_valid_drafts(
        self, backend: tuple[Proposer, Log], context: ProposerContext
    ) -> None:
        proposer, _ = backend
        drafts = proposer.propose(context, 1)
        assert len(drafts) == 1
        assert drafts[0].kind is TicketKind.CONFIG and drafts[0].budget.device_seconds <= CAPS.device_seconds

    def test_llm_traffic_is_audited_byte_for_byte(
        self, backend: tuple[Proposer, Log], context: ProposerContext
    ) -> None:
        proposer, log = backend
        proposer.propose(context, 1)
        requests = log.events("llm_http_request")
        if proposer.name == "rules":
            assert requests == []
            return
        assert (
            len(requests) == 1 and requests[0]["headers"].get("authorization", "<redacted>") == "<redacted>"
        )
        response = log.events("llm_http_response")[0]
        assert b"propose_tickets" in log.blob(response["body"])
        assert "sk-test" not in str(log.records()) and "sk-ant" not in str(log.records())


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_request_bytes_received_hash_to_the_audit_blob(
    flavour: str, keys: None, audit_log: Log, context: ProposerContext
) -> None:
    name, server = LLM_BACKENDS[flavour]
    with server([Step.call("propose_tickets", GOOD)]) as fake:
        _make(name, fake, audit_log).propose(context, 1)
    ref = audit_log.events("llm_http_request")[0]["body"]
    assert ref == "blob:" + hashlib.sha256(fake.received[0]).hexdigest()
    assert audit_log.blob(ref) == fake.received[0]


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_transient_and_bad_output_are_retried_bounded_and_audited(
    flavour: str, keys: None, audit_log: Log, context: ProposerContext
) -> None:
    name, server = LLM_BACKENDS[flavour]
    script = [
        Step.error(429),
        Step.error(503),
        Step("refusal"),
        Step.call("propose_tickets", {"tickets": [{"kind": "config"}]}),
    ]  # schema-invalid
    usage = LLMUsage()
    with server(script) as fake:
        with pytest.raises(LLMFailed, match=f"after {MAX_LLM_ATTEMPTS} attempts"):
            _make(name, fake, audit_log, usage).propose(context, 1)
    assert len(fake.received) == MAX_LLM_ATTEMPTS
    outcomes = [a["outcome"] for a in audit_log.events("llm_attempt")]
    assert outcomes == ["rate_limited", "server_error", "refusal", "reply"]
    problems = [r["problem"].split(":")[0] for r in audit_log.events("llm_output_rejected")]
    assert problems == ["refusal", "schema_invalid"]
    assert usage.attempts == MAX_LLM_ATTEMPTS and usage.input_tokens == 200  # two replies carried usage


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_malformed_output_is_corrected_then_accepted(
    flavour: str, keys: None, audit_log: Log, context: ProposerContext
) -> None:
    name, server = LLM_BACKENDS[flavour]
    script = [
        Step("text", text="Sure! Here are some ideas..."),
        Step("bad_json_args", tool="propose_tickets", text="{tickets: [oops"),
        Step.call("propose_tickets", GOOD),
    ]
    with server(script) as fake:
        drafts = _make(name, fake, audit_log).propose(context, 1)
    assert len(drafts) == 1 and len(fake.received) == 3
    assert b"not usable" in fake.received[2]  # the corrective message went back to the model


def test_timeout_is_retried_and_audited(keys: None, audit_log: Log, context: ProposerContext) -> None:
    with openai_server([Step("delay", delay_s=0.8), Step.call("propose_tickets", GOOD)]) as fake:
        drafts = _make("openai:gpt-4o", fake, audit_log, timeout_s=0.3).propose(context, 1)
    assert len(drafts) == 1
    assert [a["outcome"] for a in audit_log.events("llm_attempt")] == ["timeout", "reply"]
    assert audit_log.events("llm_http_error")[0]["error"].endswith("Timeout")


def test_unknown_proposer_lists_the_known_ones(audit_log: Log) -> None:
    with pytest.raises(UsageError, match="known: " + ", ".join(KNOWN_PROPOSERS)):
        _make("gemini:pro", None, audit_log)
    with pytest.raises(UsageError, match="not registered"):
        _make("openai", None, audit_log)
    with pytest.raises(UsageError, match="http"):
        _make("local:ollama", None, audit_log)


@pytest.mark.parametrize(
    "name, variable",
    [("openai:gpt-4o", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY")],
)
def test_missing_key_names_the_variable(
    name: str, variable: str, audit_log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(UsageError, match=f"{variable} is not set"):
        _make(name, None, audit_log)


def test_token_budget_stops_calls_before_sending(
    keys: None, audit_log: Log, context: ProposerContext
) -> None:
    from segfactory.errors import LimitExceeded

    usage = LLMUsage(token_cap=100, input_tokens=100)
    with (
        openai_server([Step.call("propose_tickets", GOOD)]) as fake,
        pytest.raises(LimitExceeded, match="token"),
    ):
        _make("openai:gpt-4o", fake, audit_log, usage).propose(context, 1)
    assert fake.received == []


def test_rules_proposer_is_deterministic_and_skips_tried(context: ProposerContext, audit_log: Log) -> None:
    from agents.context import VerdictEntry, build_context
    from agents.proposer import to_ticket

    rules = _make("rules", None, audit_log)
    first, second = rules.propose(context, 5), rules.propose(context, 5)
    assert first == second and [d.change for d in first] == [{"lr": 0.0005}, {"epochs": 6}]
    tried = VerdictEntry.not_submitted(to_ticket(first[0], "t1", 1), "DEV_LOSS")
    later = rules.propose(build_context(context.analysis, [tried]), 5)
    assert [d.change for d in later] == [{"epochs": 6}]
