"""LLM call overhead of byte-for-byte auditing (agents).

One structured proposer call (the official OpenAI SDK, forced tool call, schema validation)
against the loopback fake server: audited (``CapturingTransport`` + a real ``audit.AuditLog``
with fsync, blobs for request and response, an ``llm_attempt`` record) versus the same SDK call
with a plain ``httpx2`` client and nothing recorded. Alternating chunks, median per call.

    .venv/bin/python benchmarks/bench_agents.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2  # noqa: E402
import openai  # noqa: E402

from agents.llm import LLMCaller, LLMUsage, ToolSpec, UserTurn, make_provider  # noqa: E402
from agents.proposer import PROPOSE_TOOL, ProposalBatch  # noqa: E402
from audit import AuditLog, MemoryAnchorStore  # noqa: E402
from segfactory.home import Home  # noqa: E402
from segfactory.records import Actor  # noqa: E402
from tests.agents.fakes import Step, openai_server  # noqa: E402

DRAFT = {
    "kind": "config",
    "hypothesis": "lower lr",
    "change": {"optim.lr": 0.001},
    "budget": {"device_seconds": 60, "epochs": 2},
    "expected_effect": {"metric": "iou", "direction": "up", "size": 0.01},
}


def _plain(client: openai.OpenAI, tool: ToolSpec) -> None:
    response = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "propose"}],
        tools=[{"type": "function", "function": tool.model_dump()}],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": tool.name}},
        max_tokens=4096,
    )
    ProposalBatch.model_validate_json(response.choices[0].message.tool_calls[0].function.arguments)  # type: ignore[union-attr,index]


def main(n: int) -> None:
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    with (
        tempfile.TemporaryDirectory() as tmp,
        openai_server([Step.call("propose_tickets", {"tickets": [DRAFT]}) for _ in range(2 * n + 2)]) as fake,
    ):
        log = AuditLog(Home(Path(tmp)), MemoryAnchorStore())
        caller = LLMCaller(
            make_provider("openai:gpt-4o", log, Actor.PROPOSER, base_url=fake.base_url),
            log,
            LLMUsage(),
            Actor.PROPOSER,
        )
        plain = openai.OpenAI(base_url=fake.base_url, max_retries=0, http_client=httpx2.Client())
        audited_s, plain_s = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            caller.structured("s", UserTurn(text="propose"), PROPOSE_TOOL, ProposalBatch)
            t1 = time.perf_counter()
            _plain(plain, PROPOSE_TOOL)
            t2 = time.perf_counter()
            audited_s.append(t1 - t0)
            plain_s.append(t2 - t1)
        log.close()
    a, p = statistics.median(audited_s[1:]), statistics.median(plain_s[1:])
    sys.stdout.write(
        f"audited call: {a * 1e3:.1f} ms median; plain SDK call: {p * 1e3:.1f} ms median; "
        f"ratio audited/plain = {a / p:.2f} (n={n})\n"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
