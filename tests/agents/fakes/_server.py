"""Scriptable fake OpenAI and Anthropic servers (FastAPI + uvicorn in a thread, loopback only).

Each test gives a script: a list of :class:`Step` answers, one per request, in order. A step is
a tool call, plain text, a refusal, an HTTP error status, or a delay (a timeout for a client
with a shorter timeout). Every request body is kept exactly as received, so a test can hash
what the server got and compare it with the audit blob. The server stops itself after
``LIFETIME_S`` even if a test forgets to.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

LIFETIME_S = 60.0  # a fake server never outlives this, whatever the test does
START_TIMEOUT_S = 10.0


@dataclass
class Step:
    """One scripted answer. Exactly one of the fields below is meaningful per kind."""

    kind: str  # tool | text | refusal | status | delay | bad_json_args
    tool: str = ""
    args: Any = None
    text: str = ""
    status: int = 200
    delay_s: float = 0.0

    @staticmethod
    def call(tool: str, args: Any) -> Step:
        return Step("tool", tool=tool, args=args)

    @staticmethod
    def error(status: int) -> Step:
        return Step("status", status=status)


@dataclass
class FakeLLMServer:
    """A running fake; ``received`` holds every request body as bytes, in order."""

    flavour: str
    script: list[Step]
    received: list[bytes] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    port: int = 0
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def base_url(self) -> str:
        return (
            f"http://127.0.0.1:{self.port}/v1"
            if self.flavour == "openai"
            else f"http://127.0.0.1:{self.port}"
        )

    def next_step(self) -> Step:
        if not self.script:
            return Step("status", status=599)  # an unscripted request is a test bug: fail loudly
        return self.script.pop(0)


def _openai_body(server: FakeLLMServer, step: Step, model: str) -> dict[str, object]:
    n = next(server._ids)
    message: dict[str, object] = {"role": "assistant", "content": None, "refusal": None}
    finish = "stop"
    if step.kind in {"tool", "bad_json_args"}:
        arguments = step.text if step.kind == "bad_json_args" else json.dumps(step.args)
        message["tool_calls"] = [
            {"id": f"call_{n}", "type": "function", "function": {"name": step.tool, "arguments": arguments}}
        ]
        finish = "tool_calls"
    elif step.kind == "refusal":
        message["refusal"] = step.text or "I can't help with that."
    else:
        message["content"] = step.text
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def _anthropic_body(server: FakeLLMServer, step: Step, model: str) -> dict[str, object]:
    n = next(server._ids)
    content: list[dict[str, object]] = []
    stop = "end_turn"
    if step.kind == "tool":
        content = [{"type": "tool_use", "id": f"toolu_{n}", "name": step.tool, "input": step.args}]
        stop = "tool_use"
    elif step.kind == "bad_json_args":  # Anthropic sends input as an object; the closest: wrong shape
        content = [{"type": "tool_use", "id": f"toolu_{n}", "name": step.tool, "input": {"raw": step.text}}]
        stop = "tool_use"
    elif step.kind == "refusal":
        content = [{"type": "text", "text": step.text or "I can't help with that."}]
        stop = "refusal"
    else:
        content = [{"type": "text", "text": step.text}]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


def _error(flavour: str, status: int) -> Response:
    if flavour == "openai":
        body: dict[str, object] = {
            "error": {"message": f"scripted {status}", "type": "server_error", "code": None}
        }
    else:
        body = {"type": "error", "error": {"type": "api_error", "message": f"scripted {status}"}}
    return JSONResponse(body, status_code=status)


def _app(server: FakeLLMServer) -> FastAPI:
    app = FastAPI()

    async def handle(request: Request) -> Response:
        raw = await request.body()
        server.received.append(raw)
        server.paths.append(request.url.path)
        step = server.next_step()
        if step.kind == "delay":  # answer too late: the client has given up by then
            await asyncio.sleep(step.delay_s)
            step = Step("text", text="late")
        if step.kind == "status":
            return _error(server.flavour, step.status)
        model = json.loads(raw).get("model", "fake")
        build = _openai_body if server.flavour == "openai" else _anthropic_body
        return JSONResponse(build(server, step, model))

    app.add_api_route("/v1/chat/completions", handle, methods=["POST"])
    app.add_api_route("/v1/messages", handle, methods=["POST"])
    return app


@contextmanager
def _serve(flavour: str, script: list[Step]) -> Iterator[FakeLLMServer]:
    server = FakeLLMServer(flavour=flavour, script=list(script))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server.port = sock.getsockname()[1]
    config = uvicorn.Config(_app(server), log_level="warning", lifespan="off")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    timer = threading.Timer(LIFETIME_S, lambda: setattr(uv, "should_exit", True))
    timer.daemon = True
    timer.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield server
    finally:
        timer.cancel()
        uv.should_exit = True
        thread.join(timeout=5)
        sock.close()


def openai_server(script: list[Step]) -> Any:
    """``with openai_server([...]) as fake:`` → a running fake at ``fake.base_url``."""
    return _serve("openai", script)


def anthropic_server(script: list[Step]) -> Any:
    return _serve("anthropic", script)
