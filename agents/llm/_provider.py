"""The LLM provider interface and the registry that picks one by name.

A provider makes exactly one HTTP attempt per :meth:`LLMProvider.complete` call (the SDK's own
retries are off) through a :class:`~agents._capture.CapturingTransport`, so every byte sent and
received is an audit blob. Failures are raised as :class:`ProviderFailure` with a ``kind``;
the bounded retry policy lives in :mod:`agents.llm._call`, not in the SDK.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence

from agents._capture import CapturingTransport
from agents.llm._types import LLMReply, ToolSpec, Turn
from segfactory.errors import SegfactoryError, UsageError
from segfactory.records import Actor
from segfactory.seams import AuditSink

REQUEST_TIMEOUT_S = 60.0  # per HTTP attempt; past it the attempt fails as kind "timeout" and is retried
MAX_OUTPUT_TOKENS = 4096  # per reply (Anthropic requires a bound)

RETRYABLE_KINDS = frozenset({"timeout", "connection", "rate_limited", "server_error"})


class ProviderFailure(SegfactoryError):
    """One failed attempt. ``kind``: timeout, connection, rate_limited, server_error, client_error."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS


class LLMProvider(ABC):
    """A tool-calling chat model.

    ``complete`` sends one request and returns the parsed reply, or raises
    :class:`ProviderFailure`. It never retries and never validates tool arguments.
    """

    provider: str
    model: str

    def __init__(
        self, model: str, transport: CapturingTransport, *, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.model = model
        self.transport = transport
        self.timeout_s = timeout_s

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    @abstractmethod
    def complete(
        self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec], *, force_tool: str | None = None
    ) -> LLMReply: ...


def api_key(variable: str) -> str:
    """Keys come only from the environment; a missing one is an error naming the variable."""
    key = os.environ.get(variable, "")
    if not key:
        raise UsageError(
            f"{variable} is not set; export it to use this provider, or run with --proposer rules"
        )
    return key


KNOWN_PROVIDERS = ("anthropic:MODEL", "local:URL", "openai:MODEL")


def make_provider(
    spec: str,
    sink: AuditSink,
    actor: Actor,
    *,
    run_id: str | None = None,
    base_url: str | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> LLMProvider:
    """``openai:MODEL``, ``anthropic:MODEL`` or ``local:URL[#MODEL]`` → a provider.

    ``base_url`` overrides the vendor endpoint (tests point it at the fake servers). An unknown
    prefix is a ``UsageError`` listing the known ones; a missing key names its variable.
    """
    prefix, _, rest = spec.partition(":")
    if not rest:
        raise UsageError(f"LLM provider {spec!r} is not registered; known: {', '.join(KNOWN_PROVIDERS)}")
    transport = CapturingTransport(sink, actor, run_id=run_id)
    if prefix == "openai":
        from agents.llm._openai import OpenAIProvider  # deferred: the vendor's SDK, when chosen

        return OpenAIProvider(
            rest, transport, api_key=api_key("OPENAI_API_KEY"), base_url=base_url, timeout_s=timeout_s
        )
    if prefix == "anthropic":
        from agents.llm._anthropic import AnthropicProvider  # deferred: the vendor's SDK, when chosen

        return AnthropicProvider(
            rest, transport, api_key=api_key("ANTHROPIC_API_KEY"), base_url=base_url, timeout_s=timeout_s
        )
    if prefix == "local":
        from agents.llm._openai import OpenAIProvider  # deferred: the vendor's SDK, when chosen

        url, _, model = rest.partition("#")
        if not url.startswith(("http://", "https://")):
            raise UsageError(
                f"local provider needs an http(s) URL, got {url!r}; e.g. local:http://127.0.0.1:11434/v1#llama3"
            )
        provider = OpenAIProvider(
            model or "local",
            transport,
            base_url=base_url or url,
            timeout_s=timeout_s,
            api_key=os.environ.get("LOCAL_LLM_API_KEY") or "no-key",
        )
        provider.provider = "local"
        return provider
    raise UsageError(f"LLM provider {prefix!r} is not registered; known: {', '.join(KNOWN_PROVIDERS)}")
