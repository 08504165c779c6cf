"""Provider-neutral conversation types for tool-calling LLMs.

A conversation is a system prompt plus turns; each provider module translates them to its
wire format (OpenAI chat completions, Anthropic messages) and its reply back to
:class:`LLMReply`.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolSpec(_Frozen):
    """A tool the model may call; ``parameters`` is its JSON schema."""

    name: str
    description: str
    parameters: dict[str, object]  # a JSON schema, passed to the vendor as it is


class Attachment(_Frozen):
    """An image sent with a user turn (e.g. an error-crop PNG). Loaded before any request."""

    name: str
    media_type: Literal["image/png", "image/jpeg"]
    data: bytes

    def b64(self) -> str:
        return base64.b64encode(self.data).decode()


class ToolCall(_Frozen):
    id: str
    name: str
    arguments: str  # the raw JSON text the model produced; parsed and validated by the caller


class UserTurn(_Frozen):
    role: Literal["user"] = "user"
    text: str
    attachments: tuple[Attachment, ...] = ()


class AssistantTurn(_Frozen):
    role: Literal["assistant"] = "assistant"
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


class ToolResultTurn(_Frozen):
    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str


Turn = UserTurn | AssistantTurn | ToolResultTurn


class LLMReply(_Frozen):
    """One model reply, whatever the provider."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    stop_reason: str | None = None
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)

    def as_turn(self) -> AssistantTurn:
        return AssistantTurn(text=self.text, tool_calls=self.tool_calls)
