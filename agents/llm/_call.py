"""Bounded, audited retries around one provider, and structured output through a forced tool.

Every attempt is audited (``llm_attempt``: provider, model, role, attempt number, outcome,
tokens, latency, and the request/response blobs the transport stored). Transient failures
(timeouts, connection errors, 429, 5xx) back off exponentially; malformed output, schema-invalid
arguments and refusals are answered with a corrective message. Past :data:`MAX_LLM_ATTEMPTS`
attempts in all, :class:`LLMFailed` is raised with every outcome listed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agents.llm._provider import LLMProvider, ProviderFailure
from agents.llm._types import LLMReply, ToolResultTurn, ToolSpec, Turn, UserTurn
from agents.llm._usage import LLMUsage
from segfactory.errors import SegfactoryError
from segfactory.records import Actor
from segfactory.seams import AuditSink

MAX_LLM_ATTEMPTS = 4  # per logical call, all failure kinds together; past it: LLMFailed
BACKOFF_BASE_S = 1.0  # first wait after a transient failure; doubles each time
BACKOFF_MAX_S = 30.0  # cap on one wait

T = TypeVar("T", bound=BaseModel)


class LLMFailed(SegfactoryError):
    """A logical LLM call gave no usable answer within its bounded attempts."""

    def __init__(self, name: str, outcomes: list[str]) -> None:
        super().__init__(
            f"{name}: no usable answer after {len(outcomes)} attempts ({', '.join(outcomes)}); "
            "see the llm_attempt audit records"
        )
        self.outcomes = outcomes


class LLMCaller:
    """One provider with its audit sink, usage meter and retry policy, for one actor (role)."""

    def __init__(
        self,
        provider: LLMProvider,
        sink: AuditSink,
        usage: LLMUsage,
        actor: Actor,
        *,
        run_id: str | None = None,
        max_attempts: int = MAX_LLM_ATTEMPTS,
        backoff_base_s: float = BACKOFF_BASE_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider = provider
        self.sink = sink
        self.usage = usage
        self.actor = actor
        self.run_id = run_id
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.sleep = sleep

    def _audit(
        self, attempt: int, outcome: str, started: float, reply: LLMReply | None, detail: str = ""
    ) -> None:
        transport = self.provider.transport
        self.sink.append(
            self.actor.value,
            "llm_attempt",
            {
                "provider": self.provider.provider,
                "model": self.provider.model,
                "attempt": attempt,
                "outcome": outcome,
                "detail": detail[:1000],
                "latency_s": round(time.monotonic() - started, 4),
                "input_tokens": reply.input_tokens if reply else 0,
                "output_tokens": reply.output_tokens if reply else 0,
                "request": transport.last_request_blob,
                "response": transport.last_response_blob,
            },
            run_id=self.run_id,
        )

    def _one(
        self,
        attempt: int,
        system: str,
        turns: Sequence[Turn],
        tools: Sequence[ToolSpec],
        force_tool: str | None,
    ) -> LLMReply:
        self.usage.check_cap()
        transport = self.provider.transport
        transport.tags = {
            "provider": self.provider.provider,
            "model": self.provider.model,
            "attempt": attempt,
        }
        transport.last_request_blob = transport.last_response_blob = None
        started = time.monotonic()
        try:
            reply = self.provider.complete(system, turns, tools, force_tool=force_tool)
        except ProviderFailure as exc:
            self.usage.record(self.provider.model, 0, 0, time.monotonic() - started)
            self._audit(attempt, exc.kind, started, None, exc.detail)
            raise
        self.usage.record(
            self.provider.model, reply.input_tokens, reply.output_tokens, time.monotonic() - started
        )
        self._audit(attempt, "refusal" if reply.refusal else "reply", started, reply)
        return reply

    def _backoff(self, transient: int) -> None:
        self.sleep(min(BACKOFF_MAX_S, self.backoff_base_s * 2 ** (transient - 1)))

    def chat(self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec]) -> LLMReply:
        """One reply (tools optional), retrying only transient failures."""
        self.usage.calls += 1
        outcomes: list[str] = []
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self._one(attempt, system, turns, tools, None)
            except ProviderFailure as exc:
                outcomes.append(exc.kind)
                if not exc.retryable:
                    raise LLMFailed(self.provider.name, outcomes) from exc
                if attempt < self.max_attempts:
                    self._backoff(len(outcomes))
        raise LLMFailed(self.provider.name, outcomes)

    def structured(self, system: str, prompt: UserTurn, tool: ToolSpec, schema: type[T]) -> T:
        """Force ``tool`` and validate its arguments with ``schema``; correct and retry on failure."""
        self.usage.calls += 1
        turns: list[Turn] = [prompt]
        outcomes: list[str] = []
        for attempt in range(1, self.max_attempts + 1):
            try:
                reply = self._one(attempt, system, turns, [tool], tool.name)
            except ProviderFailure as exc:
                outcomes.append(exc.kind)
                if not exc.retryable:
                    raise LLMFailed(self.provider.name, outcomes) from exc
                if attempt < self.max_attempts:
                    self._backoff(
                        sum(
                            1
                            for o in outcomes
                            if o in {"timeout", "connection", "rate_limited", "server_error"}
                        )
                    )
                continue
            parsed, problem = _parse(reply, tool.name, schema)
            if parsed is not None:
                return parsed
            outcomes.append(problem.split(":")[0])
            self.sink.append(
                self.actor.value,
                "llm_output_rejected",
                {
                    "provider": self.provider.provider,
                    "model": self.provider.model,
                    "attempt": attempt,
                    "problem": problem,
                    "output": _detail(reply)[:2000],
                },
                run_id=self.run_id,
            )
            turns += _correction(reply, tool.name, problem)
        raise LLMFailed(self.provider.name, outcomes)


def _detail(reply: LLMReply) -> str:
    return reply.refusal or (reply.tool_calls[0].arguments if reply.tool_calls else (reply.text or ""))


def _parse(reply: LLMReply, tool: str, schema: type[T]) -> tuple[T | None, str]:
    if reply.refusal:
        return None, "refusal"
    calls = [c for c in reply.tool_calls if c.name == tool]
    if not calls:
        return None, "malformed"
    try:
        arguments: Any = json.loads(calls[0].arguments)
    except json.JSONDecodeError:
        return None, "malformed"
    try:
        return schema.model_validate(arguments), ""
    except ValidationError as exc:
        return None, f"schema_invalid: {exc.errors(include_url=False)}"[:2000]


def _correction(reply: LLMReply, tool: str, problem: str) -> list[Turn]:
    """The corrective turns after a bad reply: echo the call, answer it, restate what is needed."""
    message = (
        f"Your previous answer was not usable ({problem.split(':')[0]}). Call the tool `{tool}` exactly "
        f"once with arguments that are valid JSON matching its schema. Details: {problem}"
    )
    if reply.tool_calls:
        return [
            reply.as_turn(),
            *[ToolResultTurn(call_id=c.id, name=c.name, content=message) for c in reply.tool_calls],
        ]
    return [reply.as_turn(), UserTurn(text=message)] if reply.text else [UserTurn(text=message)]
