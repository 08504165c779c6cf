"""Anthropic messages through the official SDK."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import anthropic
import httpx2

from agents._capture import CapturingTransport
from agents.llm._provider import MAX_OUTPUT_TOKENS, REQUEST_TIMEOUT_S, LLMProvider, ProviderFailure
from agents.llm._types import AssistantTurn, LLMReply, ToolCall, ToolSpec, Turn, UserTurn

if TYPE_CHECKING:  # the SDK's own request types: the wire format, checked by mypy
    from anthropic.types import ContentBlockParam, MessageParam, ToolChoiceParam, ToolParam


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"_unparsed": text}


def _blocks(turn: Turn) -> list[ContentBlockParam]:
    if isinstance(turn, UserTurn):
        blocks: list[ContentBlockParam] = [{"type": "text", "text": turn.text}]
        return blocks + [
            {"type": "image", "source": {"type": "base64", "media_type": a.media_type, "data": a.b64()}}
            for a in turn.attachments
        ]
    if isinstance(turn, AssistantTurn):
        blocks = [{"type": "text", "text": turn.text}] if turn.text else []
        return blocks + [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c.arguments)}
            for c in turn.tool_calls
        ]
    return [{"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.content}]


def to_messages(turns: Sequence[Turn]) -> list[MessageParam]:
    """Turns → messages; consecutive user-side turns (tool results, text) merge into one message."""
    merged: list[tuple[bool, list[ContentBlockParam]]] = []  # (the assistant's, its blocks), in order
    for turn in turns:
        assistant = isinstance(turn, AssistantTurn)
        if merged and not merged[-1][0] and not assistant:
            merged[-1][1].extend(_blocks(turn))
        else:
            merged.append((assistant, _blocks(turn)))
    return [_message(assistant, blocks) for assistant, blocks in merged]


def _message(assistant: bool, blocks: list[ContentBlockParam]) -> MessageParam:
    if assistant:
        return {"role": "assistant", "content": blocks}
    return {"role": "user", "content": blocks}


def _failure(exc: anthropic.AnthropicError) -> ProviderFailure:
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderFailure("timeout", str(exc))
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderFailure("connection", str(exc))
    if isinstance(exc, anthropic.RateLimitError):
        return ProviderFailure("rate_limited", str(exc))
    if isinstance(exc, anthropic.InternalServerError):
        return ProviderFailure("server_error", str(exc))
    if isinstance(exc, anthropic.APIStatusError) and exc.status_code >= 500:
        return ProviderFailure("server_error", str(exc))  # e.g. 529 overloaded
    if isinstance(exc, anthropic.APIResponseValidationError):
        return ProviderFailure("malformed_response", str(exc))
    return ProviderFailure("client_error", str(exc))


class _ToolArgs(TypedDict, total=False):
    """The tool arguments of a request, present only when the call offers tools."""

    tools: list[ToolParam]
    tool_choice: ToolChoiceParam


class AnthropicProvider(LLMProvider):
    provider = "anthropic"

    def __init__(
        self,
        model: str,
        transport: CapturingTransport,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        super().__init__(model, transport, timeout_s=timeout_s)
        http = httpx2.Client(transport=transport, timeout=timeout_s)
        self.client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s, http_client=http
        )

    def complete(
        self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec], *, force_tool: str | None = None
    ) -> LLMReply:
        kwargs: _ToolArgs = {}
        if tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": force_tool} if force_tool else {"type": "auto"}
        try:
            response = self.client.messages.create(
                model=self.model,
                system=system,
                messages=to_messages(turns),
                max_tokens=MAX_OUTPUT_TOKENS,
                **kwargs,
            )
        except anthropic.AnthropicError as exc:
            raise _failure(exc) from exc
        return _reply(response)


def _reply(response: Any) -> LLMReply:
    texts = [b.text for b in response.content if b.type == "text"]
    calls = tuple(
        ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input))
        for b in response.content
        if b.type == "tool_use"
    )
    refusal = "\n".join(texts) or "refused" if response.stop_reason == "refusal" else None
    return LLMReply(
        text="\n".join(texts) or None,
        tool_calls=calls,
        refusal=refusal,
        stop_reason=response.stop_reason,
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
    )
