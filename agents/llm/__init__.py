"""LLM providers behind one interface: OpenAI, Anthropic and OpenAI-compatible local servers.

``make_provider("openai:gpt-4o", sink, actor)`` builds a provider whose every HTTP byte is
audited; :class:`LLMCaller` adds bounded, audited retries and structured output.
"""

from agents.llm._call import MAX_LLM_ATTEMPTS, LLMCaller, LLMFailed
from agents.llm._provider import KNOWN_PROVIDERS, LLMProvider, ProviderFailure, api_key, make_provider
from agents.llm._types import (
    AssistantTurn,
    Attachment,
    LLMReply,
    ToolCall,
    ToolResultTurn,
    ToolSpec,
    Turn,
    UserTurn,
)
from agents.llm._usage import LLMUsage
from agents.llm.attachments import MAX_ATTACHMENT_BYTES, load_attachment, load_attachments

__all__ = [
    "KNOWN_PROVIDERS",
    "MAX_ATTACHMENT_BYTES",
    "MAX_LLM_ATTEMPTS",
    "AssistantTurn",
    "Attachment",
    "LLMCaller",
    "LLMFailed",
    "LLMProvider",
    "LLMReply",
    "LLMUsage",
    "ProviderFailure",
    "ToolCall",
    "ToolResultTurn",
    "ToolSpec",
    "Turn",
    "UserTurn",
    "api_key",
    "load_attachment",
    "load_attachments",
    "make_provider",
]
