"""Byte-for-byte capture of LLM traffic (trust rule 10).

:class:`CapturingTransport` wraps the real ``httpx2`` transport the official SDKs use. For every
HTTP exchange it stores the request body exactly as sent and the response body exactly as
received (before any content decoding) as audit blobs, and appends ``llm_http_request`` /
``llm_http_response`` records that reference them. Credentials never enter the log: the
``authorization`` and ``x-api-key`` headers are redacted in the recorded headers.
"""

from __future__ import annotations

import time
from typing import TypedDict

import httpx2

from segfactory.records import Actor
from segfactory.seams import AuditSink

REDACTED_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "cookie"})


class CallTags(TypedDict, total=False):
    """What the caller says about the exchange it is about to make (``agents.llm.LLMCaller``)."""

    provider: str
    model: str
    attempt: int


def _headers(headers: httpx2.Headers) -> dict[str, str]:
    return {k.lower(): ("<redacted>" if k.lower() in REDACTED_HEADERS else v) for k, v in headers.items()}


class CapturingTransport(httpx2.BaseTransport):
    """An ``httpx2`` transport that audits every request and response body as a blob.

    ``tags`` are merged into every record's payload (the caller sets provider, model and attempt
    before each call). Transport errors (timeouts, refused connections) are recorded as
    ``llm_http_error`` and re-raised unchanged so the SDK maps them to its own exceptions.
    """

    def __init__(
        self,
        sink: AuditSink,
        actor: Actor,
        *,
        run_id: str | None = None,
        inner: httpx2.BaseTransport | None = None,
    ) -> None:
        self._sink = sink
        self._actor = actor
        self._run_id = run_id
        self._inner = inner or httpx2.HTTPTransport()
        self.tags: CallTags = {}
        self.last_request_blob: str | None = None
        self.last_response_blob: str | None = None

    def _append(self, event: str, payload: dict[str, object]) -> None:
        self._sink.append(self._actor.value, event, {**self.tags, **payload}, run_id=self._run_id)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.read()
        self.last_request_blob = self._sink.put_blob(body)
        self._append(
            "llm_http_request",
            {
                "method": request.method,
                "url": str(request.url),
                "headers": _headers(request.headers),
                "body": self.last_request_blob,
                "bytes": len(body),
            },
        )
        started = time.monotonic()
        try:
            response = self._inner.handle_request(request)
            raw = b"".join(response.iter_raw())  # undecoded, exactly as received
            response.close()
        except httpx2.HTTPError as exc:
            self._append(
                "llm_http_error",
                {
                    "error": type(exc).__name__,
                    "detail": str(exc)[:500],
                    "latency_s": round(time.monotonic() - started, 4),
                },
            )
            raise
        self.last_response_blob = self._sink.put_blob(raw)
        self._append(
            "llm_http_response",
            {
                "status": response.status_code,
                "headers": _headers(response.headers),
                "body": self.last_response_blob,
                "bytes": len(raw),
                "latency_s": round(time.monotonic() - started, 4),
            },
        )
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            content=raw,
            request=request,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()
