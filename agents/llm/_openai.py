"""OpenAI chat completions (and any OpenAI-compatible server) through the official SDK."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import httpx2
import openai

from agents._capture import CapturingTransport
from agents.llm._provider import MAX_OUTPUT_TOKENS, REQUEST_TIMEOUT_S, LLMProvider, ProviderFailure
from agents.llm._types import AssistantTurn, LLMReply, ToolCall, ToolResultTurn, ToolSpec, Turn, UserTurn

if TYPE_CHECKING:  # the SDK's own request types: the wire format, checked by mypy
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
        ChatCompletionToolChoiceOptionParam,
        ChatCompletionUserMessageParam,
    )


def _user(turn: UserTurn) -> ChatCompletionUserMessageParam:
    if not turn.attachments:
        return {"role": "user", "content": turn.text}
    parts: list[ChatCompletionContentPartParam] = [{"type": "text", "text": turn.text}]
    parts += [
        {"type": "image_url", "image_url": {"url": f"data:{a.media_type};base64,{a.b64()}"}}
        for a in turn.attachments
    ]
    return {"role": "user", "content": parts}


def _assistant(turn: AssistantTurn) -> ChatCompletionAssistantMessageParam:
    message: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.tool_calls
        ]
    return message


def to_messages(system: str, turns: Sequence[Turn]) -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}]
    for turn in turns:
        if isinstance(turn, UserTurn):
            messages.append(_user(turn))
        elif isinstance(turn, AssistantTurn):
            messages.append(_assistant(turn))
        elif isinstance(turn, ToolResultTurn):
            messages.append({"role": "tool", "tool_call_id": turn.call_id, "content": turn.content})
    return messages


def _failure(exc: openai.OpenAIError) -> ProviderFailure:
    if isinstance(exc, openai.APITimeoutError):
        return ProviderFailure("timeout", str(exc))
    if isinstance(exc, openai.APIConnectionError):
        return ProviderFailure("connection", str(exc))
    if isinstance(exc, openai.RateLimitError):
        return ProviderFailure("rate_limited", str(exc))
    if isinstance(exc, openai.InternalServerError):
        return ProviderFailure("server_error", str(exc))
    if isinstance(exc, openai.APIResponseValidationError):
        return ProviderFailure("malformed_response", str(exc))
    return ProviderFailure("client_error", str(exc))


class _ToolArgs(TypedDict, total=False):
    """The tool arguments of a request, present only when the call offers tools."""

    tools: list[ChatCompletionFunctionToolParam]
    tool_choice: ChatCompletionToolChoiceOptionParam


class OpenAIProvider(LLMProvider):
    provider = "openai"

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
        self.client = openai.OpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s, http_client=http
        )

    def complete(
        self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec], *, force_tool: str | None = None
    ) -> LLMReply:
        kwargs: _ToolArgs = {}
        if tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
            kwargs["tool_choice"] = (
                {"type": "function", "function": {"name": force_tool}} if force_tool else "auto"
            )
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=to_messages(system, turns),
                max_tokens=MAX_OUTPUT_TOKENS,
                **kwargs,
            )
        except openai.OpenAIError as exc:
            raise _failure(exc) from exc
        return _reply(response)


def _reply(response: Any) -> LLMReply:
    if not response.choices:
        raise ProviderFailure("malformed_response", "reply has no choices")
    choice = response.choices[0]
    message = choice.message
    calls = tuple(
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
        for c in (message.tool_calls or [])
        if getattr(c, "function", None) is not None
    )
    usage = response.usage
    return LLMReply(
        text=message.content,
        tool_calls=calls,
        refusal=getattr(message, "refusal", None),
        stop_reason=choice.finish_reason,
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
    )


__all__ = ["OpenAIProvider", "to_messages"]
