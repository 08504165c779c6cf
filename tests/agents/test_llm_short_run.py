"""Each fake LLM vendor (OpenAI, Anthropic, a local OpenAI-compatible server) drives a short run.

The real SDK client of each provider talks to the fake on loopback through the whole graph
(stub runner and gate): the tool call becomes a ticket that wins, replicates and is promoted;
the unscripted second ask fails its bounded retries and the loop stops cleanly. Every request
body the fake received hashes, in order, to the blob of an ``llm_http_request`` audit record.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import pytest

from agents.graph import LoopDeps, build_graph, run_loop
from agents.judge import Judge
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.validate import ticket_problems
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.records import Budget
from tests.agents._stubs import make_services
from tests.agents.conftest import Log
from tests.agents.fakes import Step, anthropic_server, openai_server

DRAFT = {
    "kind": "config",
    "hypothesis": "a lower learning rate finds more small voids",
    "change": {"optim.lr": 0.001},
    "budget": {"device_seconds": 60, "epochs": 2},
    "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.01},
}
VENDORS = {
    "openai": ("openai:gpt-4o-mini", openai_server),
    "anthropic": ("anthropic:claude-sonnet-4-6", anthropic_server),
    "local": ("local:{url}#qwen2.5", openai_server),
}
pytestmark = pytest.mark.slow  # 5-30 s a vendor: the SDKs' own retry pauses on the unscripted ask


def _graph(name: str, base_url: str, log: Log, tmp_path: Path, usage: LLMUsage) -> Any:
    policy = load_budget_policy()
    seeds = itertools.count(100)
    proposer = get_proposer(
        name.format(url=base_url),
        sink=log,
        usage=usage,
        base_url=base_url,
        run_id="short",
        default_budget=Budget(device_seconds=60, epochs=2),
        backoff_base_s=0.01,
        timeout_s=5,
        caps=Budget(device_seconds=120, epochs=10),
    )
    deps = LoopDeps(
        services=make_services(),
        judge=Judge(log),
        sink=log,
        usage=usage,
        proposer=proposer,
        caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=20, llm_tokens=100_000),
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_seed=lambda: next(seeds),
    )
    return build_graph(deps, tmp_path / "state.sqlite")


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_fake_vendor_drives_a_short_run_and_every_byte_is_on_record(
    vendor: str, keys: None, audit_log: Log, tmp_path: Path
) -> None:
    name, server = VENDORS[vendor]
    usage = LLMUsage()
    with server([Step.call("propose_tickets", {"tickets": [DRAFT]})]) as fake:
        state = run_loop(_graph(name, fake.base_url, audit_log, tmp_path, usage), "short")
    assert [(d.ticket_id, d.decision) for d in state.decisions] == [
        ("short-t001", "replicate"),
        ("short-t001", "promote"),
    ]
    assert state.stop_reason.startswith("proposer failed")  # bounded retries, then a clean stop
    assert audit_log.events("run_end") and audit_log.events("proposer_failed")
    sent = [r["body"] for r in audit_log.events("llm_http_request")]
    assert len(fake.received) > 1 and sent == [
        "blob:" + hashlib.sha256(body).hexdigest() for body in fake.received
    ]
    assert all(audit_log.blob(ref) == body for ref, body in zip(sent, fake.received, strict=True))
    assert usage.input_tokens == 100 and usage.output_tokens == 20  # the one answered call, accounted
