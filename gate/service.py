"""The gate service (issue 4, §1 and §5): FastAPI on a Unix socket, or TCP with a bearer token.

Endpoints (all JSON):

- ``POST /submit`` ``{"ticket_id", "model_b64", "train_data"?, "replicate_of"?, "run_id"?}`` ->
  ``CoarseVerdict``. Any malformed or oversized request is still a submission: it spends a
  query and gets ``INVALID``. The response is padded to a multiple of ``PAD_QUANTUM_S``.
- ``GET /status`` -> pinned code hash, win-rule hash, tier versions and budgets, quarantines.
- ``GET /audit/events?after=N``, ``POST /audit/ack {"up_to": N}``: the audit writer's pull queue.
- ``PUT /anchor {"seq", "hash", "run_id"}``, ``GET /anchor``, ``GET /anchor/history``: the audit
  chain's anchors; an anchor behind the latest one gets 409 (the log was cut or rewritten).
- ``POST /milestone`` (for the ``gate milestone`` command a person runs).
- ``POST /promote {"ticket_id"}``: make that ticket's model the global best, only after its
  confirm-a WIN and a confirm-b replicate WIN (the gate checks its own ledger).
- ``POST /retract {"model_sha256", "reason"}``: a challenge retracted that model's win; when it is
  the global best, the best moves back to the last earlier best that is another model (kind
  ``retraction``). Answers ``{"moved_to": sha256 | null}`` (null: it was not the best).

A wrong or missing token gets 401 with ``{"verdict": "INVALID"}`` and spends nothing (an
unauthenticated caller must not be able to burn budgets). Tokens are compared in constant time.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import grp
import hashlib
import hmac
import json
import logging
import math
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from gate.core import Gate
from gate.intake import MAX_MODEL_BYTES
from gate.ledger import LedgerError
from segfactory.errors import GateError, PolicyError, UsageError

log = logging.getLogger(__name__)

PAD_QUANTUM_S = 2.0  # every /submit answer is padded to a multiple of this many seconds
MAX_UPLOAD_BYTES = MAX_MODEL_BYTES * 4 // 3 + 64 * 1024  # base64 model + fields; past it: INVALID
MAX_CONTROL_BYTES = 64 * 1024  # body of any other endpoint; past it: 413
MAX_RETRACT_REASON = 2000  # characters of a retraction's reason kept in the ledger; the rest is cut
MAX_MILESTONE_BYTES = 256 * 1024**2  # /milestone body: a few base64 models; past it: 409 with the reason
SOCKET_MODE = 0o660  # the Unix socket: owner and group `segfactory` only
SOCKET_DIR_MODE = 0o750
SERVICE_GROUP = "segfactory"
TOKEN_ENV = "SEGFACTORY_GATE_TOKEN"


def _token_ok(request: Request, token: str | None) -> bool:
    if token is None:
        return True
    header = request.headers.get("authorization", "")
    return hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


async def _read_capped(request: Request, cap: int) -> bytes | None:
    """The body, or None when it is (or claims to be) larger than ``cap``."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > cap):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_submission(body: bytes | None) -> tuple[dict[str, Any], bytes, str]:
    """(fields, model bytes, problem) from a raw body; problem is '' when well-formed."""
    if body is None:
        return {}, b"", f"upload larger than MAX_UPLOAD_BYTES={MAX_UPLOAD_BYTES}"
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        model = base64.b64decode(str(data.get("model_b64", "")), validate=True)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        return {}, b"", f"malformed submission JSON: {type(exc).__name__}"
    fields = {k: data.get(k) for k in ("ticket_id", "train_data", "replicate_of", "run_id")}
    if not all(v is None or isinstance(v, str) for v in fields.values()):
        return {}, b"", "submission fields must be strings"
    return fields, model, ""


def create_app(gate: Gate, token: str | None = None, pad_quantum_s: float = PAD_QUANTUM_S) -> FastAPI:
    app = FastAPI(title="segfactory gate", docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Any) -> Response:
        if not _token_ok(request, token):
            gate.ledger.queue_event("gate.auth_refused", {"path": request.url.path})
            return JSONResponse({"verdict": "INVALID"}, status_code=401)
        response: Response = await call_next(request)
        return response

    @app.post("/submit")
    async def submit(request: Request) -> JSONResponse:
        start = time.monotonic()
        fields, model, problem = _parse_submission(await _read_capped(request, MAX_UPLOAD_BYTES))
        if problem:
            raw = (fields.get("ticket_id") or "") + problem + str(time.time_ns())
            fields = {"ticket_id": "malformed-" + hashlib.sha256(raw.encode()).hexdigest()[:16]}
            gate.ledger.queue_event("gate.malformed", {"reason": problem, "ticket_id": fields["ticket_id"]})

        def judge() -> Any:
            with lock:
                return gate.submit(model, str(fields.get("ticket_id") or ""), fields.get("replicate_of"),
                                   fields.get("train_data"), fields.get("run_id"))

        outcome = await run_in_threadpool(judge)  # keeps /status, /anchor and /audit answering
        await asyncio.sleep(_padding(start, pad_quantum_s))
        return JSONResponse(outcome.verdict.model_dump(mode="json"))

    @app.get("/status")
    def status() -> dict[str, Any]:
        return gate.status()

    @app.post("/promote")
    async def promote(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if data is None or not isinstance(data.get("ticket_id"), str):
            return JSONResponse({"error": "body must be {\"ticket_id\": str}"}, status_code=400)

        def move() -> str:
            with lock:
                return gate.promote(str(data["ticket_id"]))

        try:
            return JSONResponse({"model_sha256": await run_in_threadpool(move)})
        except GateError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)

    _add_audit_routes(app, gate, lock)
    _add_milestone_route(app, gate, lock)
    _add_retract_route(app, gate, lock)
    return app


def _add_retract_route(app: FastAPI, gate: Gate, lock: threading.Lock) -> None:
    @app.post("/retract")
    async def retract(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if data is None or not isinstance(data.get("model_sha256"), str) or not isinstance(data.get("reason"), str):
            return JSONResponse({"error": "body must be {\"model_sha256\": str, \"reason\": str}"}, status_code=400)

        def move() -> str | None:
            with lock:
                return retract_best(gate, str(data["model_sha256"]), str(data["reason"]))

        try:
            return JSONResponse({"moved_to": await run_in_threadpool(move)})
        except GateError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)


def retract_best(gate: Gate, model_sha256: str, reason: str) -> str | None:
    """Move the best back past a retracted model; None when that model is not the current best."""
    current = gate.ledger.current_best()
    if current is None or current["model_sha256"] != model_sha256:
        return None
    earlier = [b for b in gate.ledger.best_history() if b["model_sha256"] != model_sha256]
    if not earlier:
        raise GateError(f"the retracted model {model_sha256[:12]}… is the only best ever recorded; nothing to "
                        "move back to")
    return gate.set_best(Path(earlier[-1]["model_path"]), "retraction", reason[:MAX_RETRACT_REASON])


def _padding(start: float, quantum: float) -> float:
    """Seconds to wait so that the answer leaves at a multiple of ``quantum`` after ``start``."""
    if quantum <= 0:
        return 0.0
    elapsed = time.monotonic() - start
    return max(0.0, max(1, math.ceil(elapsed / quantum)) * quantum - elapsed)


async def _json_body(request: Request, cap: int = MAX_CONTROL_BYTES) -> dict[str, Any] | None:
    body = await _read_capped(request, cap)
    try:
        data = json.loads(body) if body is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _add_audit_routes(app: FastAPI, gate: Gate, lock: threading.Lock) -> None:
    @app.get("/audit/events")
    def events(after: int = 0) -> dict[str, Any]:
        return {"events": gate.ledger.events_after(after)}

    @app.post("/audit/ack")
    async def ack(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if data is None or not isinstance(data.get("up_to"), int):
            return JSONResponse({"error": "body must be {\"up_to\": int}"}, status_code=400)
        try:
            return JSONResponse({"dropped": gate.ledger.ack_events(int(data["up_to"]))})
        except LedgerError as exc:  # an ack past what was delivered would drop unread events
            return JSONResponse({"error": str(exc)}, status_code=409)

    @app.put("/anchor")
    async def put_anchor(request: Request) -> JSONResponse:
        data = await _json_body(request)
        ok = data is not None and isinstance(data.get("seq"), int) and isinstance(data.get("hash"), str)
        if not ok or data is None or not (data.get("run_id") is None or isinstance(data.get("run_id"), str)):
            return JSONResponse({"error": "body must be {seq: int, hash: str, run_id: str|null}"}, status_code=400)
        try:
            gate.ledger.put_anchor(int(data["seq"]), str(data["hash"]), data.get("run_id"))
        except LedgerError as exc:  # behind the latest anchor: the log was cut or rewritten
            gate.ledger.queue_event("gate.anchor_refused", {"seq": data["seq"], "hash": data["hash"], "reason": str(exc)})
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse({"ok": True})

    @app.get("/anchor/history")
    def anchor_history() -> dict[str, Any]:
        return {"anchors": gate.ledger.anchor_history()}

    @app.get("/anchor")
    def get_anchor() -> JSONResponse:
        anchor = gate.ledger.latest_anchor()
        if anchor is None:
            return JSONResponse({"error": "no anchor stored"}, status_code=404)
        return JSONResponse(anchor)


def _add_milestone_route(app: FastAPI, gate: Gate, lock: threading.Lock) -> None:
    @app.post("/milestone")
    async def milestone(request: Request) -> JSONResponse:
        from gate.milestones import MilestoneRequest, run_milestone

        data = await _json_body(request, MAX_MILESTONE_BYTES)
        if data is None:
            return JSONResponse({"error": f"milestone body is not a JSON object within MAX_MILESTONE_BYTES="
                                          f"{MAX_MILESTONE_BYTES}"}, status_code=409)
        try:
            req = MilestoneRequest.model_validate(data)

            def score() -> dict[str, Any]:
                with lock:
                    return run_milestone(gate, req)

            report = await run_in_threadpool(score)
        except (GateError, PolicyError, UsageError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse(report)


def bind_unix_socket(path: Path) -> socket.socket:
    """A listening Unix socket in its own directory: dir 0750, socket 0660, group segfactory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, SOCKET_DIR_MODE)
    if path.exists() or path.is_symlink():
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, SOCKET_MODE)
    try:
        gid = grp.getgrnam(SERVICE_GROUP).gr_gid
        os.chown(path, -1, gid)
        os.chown(path.parent, -1, gid)
    except (KeyError, PermissionError):
        log.info("group %s not available; socket %s stays owner-only by group", SERVICE_GROUP, path)
    sock.listen(64)
    return sock


def serve(gate: Gate, socket_path: Path | None = None, host: str | None = None, port: int | None = None,
          token: str | None = None, pad_quantum_s: float = PAD_QUANTUM_S) -> None:
    """Run the service until stopped. TCP without a token is refused (STYLE.md §9)."""
    import uvicorn

    if socket_path is None and host is None:
        raise UsageError("give --socket PATH, or --host/--port with a token")
    if host is not None and not token:
        raise UsageError(f"the gate refuses TCP without a bearer token; set ${TOKEN_ENV} or use --socket")
    app = create_app(gate, token, pad_quantum_s)
    config = uvicorn.Config(app, log_level="warning", access_log=False, limit_concurrency=64)
    server = uvicorn.Server(config)
    if socket_path is not None:
        server.run(sockets=[bind_unix_socket(Path(socket_path))])
    else:
        config.host, config.port = str(host), int(port or 0)
        server.run()
