"""The gate service (trust rules 4-5): FastAPI on a Unix socket, or TCP, every request with a bearer
credential.

Two credentials, two surfaces. The **agent** credential reaches only what an agent-facing caller
needs; the **host** credential (the orchestrator, the audit writer, a person's CLI) reaches
everything. ``serve`` draws both at start and, on a Unix socket, writes them beside it as
``agent.token`` (mode 0640, group ``segfactory``) and ``host.token`` (mode 0600, the gate's user
alone); ``GateClient`` picks the one its ``role`` names. A request without a known credential
gets 401 ``{"verdict": "INVALID"}``, an agent credential on a host endpoint gets 403; neither
spends anything, both are audit events.

Agent surface:

- ``POST /submit`` ``{"ticket_id", "model_b64", "train_data"?, "replicate_of"?, "run_id"?}`` ->
  ``CoarseVerdict``. Any malformed or oversized request is still a submission: it spends a
  query and gets ``INVALID``. Submissions are judged one at a time, each in a slot of its own
  (``gate.core.Deadline``): it starts when the request arrived or when the one before it answered,
  whichever is later, and lasts the gate's answer time for what scoring that submission costs
  (``AnswerTime.for_costs``, counted from the bytes at intake). Every answer leaves at the end of
  its slot, whatever it holds; a verdict not reached by then is ``INVALID`` (an overrun: the reason
  and the late verdict go to people). An unforeseen error is that same padded INVALID. ``serve``
  fixes the answer time once, before it answers anything, from the gate's own measured verdict
  time (``gate.calibrate``), or takes a person's override when it is not below that.
- ``GET /status`` -> pinned code hash, win-rule hash, tier versions and budgets, current best, the
  answer time and how it was set; quarantines' reasons and the calibration behind the answer
  time only for the host credential.

Host surface:

- ``GET /audit/events?after=N``, ``POST /audit/ack {"up_to": N}``: the audit writer's pull queue.
- ``PUT /anchor {"seq", "hash", "run_id"}``, ``GET /anchor``: the audit chain's anchors.
- ``POST /milestone`` (for the ``gate milestone`` command a person runs).
- ``POST /promote {"ticket_id"}``: make that ticket's model the global best, only after its
  confirm-a WIN and a confirm-b replicate WIN (the gate checks its own ledger).
- ``POST /retract {"model_sha256", "reason"}``: a challenge retracted that model's win; when it is
  the global best, the best moves back to the last earlier best that is another model (kind
  ``retraction``). Answers ``{"moved_to": sha256 | null}`` (null: it was not the best).
- ``POST /reference {"model_b64", "reason"}``: an A/A run's reference becomes the best (kind
  ``reference``, never a promotion). ``POST /rotate {"tier"}``: a fresh secret-seeded version.

Tokens are compared in constant time.
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
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from gate import tiers
from gate.calibrate import ANSWER_TIME_FLOOR_S, Override, fix_answer_time
from gate.core import Deadline, Gate
from gate.intake import MAX_MODEL_BYTES
from gate.ledger import LedgerError
from gate.milestones import MilestoneRequest, run_milestone
from gate.roles import AGENT, AGENT_ROUTES, HOST, token_file
from gate.setup import build_fresh
from segfactory.errors import GateError, PolicyError, UsageError
from segfactory.records import CoarseVerdict, Tier, Verdict

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = MAX_MODEL_BYTES * 4 // 3 + 64 * 1024  # base64 model + fields; past it: INVALID
MAX_CONTROL_BYTES = 64 * 1024  # body of any other endpoint; past it: 413
MAX_RETRACT_REASON = 2000  # characters of a retraction's reason kept in the ledger; the rest is cut
MAX_MILESTONE_BYTES = 256 * 1024**2  # /milestone body: a few base64 models; past it: 409 with the reason
SOCKET_MODE = 0o660  # the Unix socket: owner and group `segfactory` only
SOCKET_DIR_MODE = 0o750
# credentials beside the socket: the agent's for the gate and group `segfactory`; the host's for
# the gate's user alone (root hands it to the command it restarts as `segfactory`, over a pipe)
TOKEN_FILE_MODES = {AGENT: 0o640, HOST: 0o600}
SERVICE_GROUP = "segfactory"
TOKEN_ENV = "SEGFACTORY_GATE_TOKEN"  # the host credential for TCP (a person sets it)
AGENT_TOKEN_ENV = "SEGFACTORY_GATE_AGENT_TOKEN"  # the agent credential for TCP (optional)


@dataclass(frozen=True)
class Credentials:
    """The two bearer tokens. Both None only when an app is embedded in a test process."""

    host: str | None
    agent: str | None

    def role_of(self, request: Request) -> str | None:
        if self.host is None and self.agent is None:
            return HOST
        header = request.headers.get("authorization", "").encode()
        for role, token in ((HOST, self.host), (AGENT, self.agent)):
            if token is not None and hmac.compare_digest(header, f"Bearer {token}".encode()):
                return role
        return None


def issue_credentials(directory: Path) -> Credentials:
    """Fresh random tokens for both roles, written beside the socket (replacing any earlier ones)."""
    creds = Credentials(host=secrets.token_urlsafe(32), agent=secrets.token_urlsafe(32))
    try:
        gid = grp.getgrnam(SERVICE_GROUP).gr_gid
    except KeyError:
        gid = -1
    for role, token in ((HOST, creds.host), (AGENT, creds.agent)):
        path = token_file(directory, role)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(str(token))
            if gid >= 0 and TOKEN_FILE_MODES[role] & 0o040:
                try:
                    os.fchown(fh.fileno(), -1, gid)
                except PermissionError:
                    log.info("cannot give %s to group %s; it stays owner-only", path, SERVICE_GROUP)
            os.fchmod(fh.fileno(), TOKEN_FILE_MODES[role])
        os.replace(tmp, path)
    return creds


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


def _parse_submission(body: bytes | None) -> tuple[dict[str, str | None], bytes, str]:
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


def _invalid(gate: Gate, fields: dict[str, str | None]) -> CoarseVerdict:
    """The INVALID an agent gets when the gate itself could not answer in time (or at all)."""
    tier = Tier.CONFIRM_B.value if fields.get("replicate_of") else Tier.CONFIRM_A.value
    try:
        version = tiers.current_version(gate.vault, tier)
        left = gate.ledger.budget_left(tier, version) if version is not None else 0
    except Exception:  # noqa: BLE001 - the answer must leave even when the ledger cannot be read
        left = 0
    return CoarseVerdict(
        ticket_id=Gate.ticket_id_for(fields.get("ticket_id")),
        tier=tier,
        verdict=Verdict.INVALID,
        queries_left=left,
    )


def create_app(
    gate: Gate,
    token: str | None = None,
    answer_time_s: float = ANSWER_TIME_FLOOR_S,
    *,
    agent_token: str | None = None,
    pad_quantum_s: float | None = None,
) -> FastAPI:
    """The app. ``token`` is the host credential, ``agent_token`` the agent's; with neither, every
    caller is host (an app embedded in a test only: ``serve`` always draws both). ``answer_time_s``
    is what ``serve`` fixed at start (``gate.calibrate``); <= 0 answers unpadded, which only an app
    embedded in a test process can ask for (``serve`` refuses it); ``pad_quantum_s`` is its former
    name."""
    answer_time = answer_time_s if pad_quantum_s is None else pad_quantum_s
    creds = Credentials(host=token, agent=agent_token)
    app = FastAPI(title="segfactory gate", docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()

    @app.middleware("http")
    async def authorise(request: Request, call_next: Any) -> Response:
        role = creds.role_of(request)
        if role is None:
            gate.ledger.queue_event("gate.auth_refused", {"path": request.url.path})
            return JSONResponse({"verdict": "INVALID"}, status_code=401)
        if role == AGENT and (request.method, request.url.path) not in AGENT_ROUTES:
            gate.ledger.queue_event("gate.auth_refused", {"path": request.url.path, "role": AGENT})
            return JSONResponse(
                {"error": f"{request.method} {request.url.path} needs the host credential"}, status_code=403
            )
        request.state.role = role
        response: Response = await call_next(request)
        return response

    queue: list[Deadline] = []  # the last submission's deadline: the next one's slot starts after it

    @app.post("/submit")
    async def submit(request: Request) -> JSONResponse:
        deadline = None
        if answer_time > 0:
            deadline = Deadline(time.monotonic(), answer_time, after=queue[-1] if queue else None)
            queue[:] = [deadline]
        verdict = await _submission(gate, lock, request, deadline)
        if deadline is not None:
            await asyncio.sleep(max(0.0, deadline.at - time.monotonic()))
        return JSONResponse(verdict.model_dump(mode="json"))

    @app.get("/status")
    def status(request: Request) -> dict[str, object]:
        report = gate.status()
        if request.state.role != HOST:  # a quarantine's reason quotes held-back rows: people only
            report = report.for_agent()
        return report.as_json()

    @app.post("/promote")
    async def promote(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if data is None or not isinstance(data.get("ticket_id"), str):
            return JSONResponse({"error": 'body must be {"ticket_id": str}'}, status_code=400)

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
    _add_people_routes(app, gate, lock)
    return app


async def _submission(
    gate: Gate, lock: threading.Lock, request: Request, deadline: Deadline | None
) -> CoarseVerdict:
    """The verdict for one /submit, or INVALID when it is not reached by the deadline or fails."""
    fields: dict[str, str | None] = {}
    try:
        fields, model, problem = _parse_submission(await _read_capped(request, MAX_UPLOAD_BYTES))
        if problem:
            raw = (fields.get("ticket_id") or "") + problem + str(time.time_ns())
            fields = {"ticket_id": "malformed-" + hashlib.sha256(raw.encode()).hexdigest()[:16]}
            gate.ledger.queue_event("gate.malformed", {"reason": problem, "ticket_id": fields["ticket_id"]})

        def judge() -> CoarseVerdict:
            with lock:
                return gate.submit(
                    model,
                    str(fields.get("ticket_id") or ""),
                    fields.get("replicate_of"),
                    fields.get("train_data"),
                    fields.get("run_id"),
                    deadline,
                ).verdict

        task = asyncio.ensure_future(run_in_threadpool(judge))  # /status, /anchor and /audit keep answering
        if deadline is None:
            return await task
        done: set[asyncio.Future[CoarseVerdict]] = set()
        while not done and time.monotonic() < deadline.at:  # ``at`` moves when intake extends it
            done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline.at - time.monotonic()))
        if task in done or not deadline.claim("overrun"):
            return await task  # reached in time (its record is being written, if not yet done)
        return _invalid(gate, fields)  # the gate records the overrun when the late verdict arrives
    except Exception as exc:  # noqa: BLE001 - an unforeseen error is the same padded INVALID as any other
        log.exception("gate: /submit failed")
        try:
            gate.ledger.queue_event(
                "gate.internal_error",
                {"ticket_id": fields.get("ticket_id"), "reason": f"{type(exc).__name__}: {exc}"},
            )
        except Exception:  # noqa: BLE001
            log.exception("gate: could not queue the internal error")
        return _invalid(gate, fields)


def _add_retract_route(app: FastAPI, gate: Gate, lock: threading.Lock) -> None:
    @app.post("/retract")
    async def retract(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if (
            data is None
            or not isinstance(data.get("model_sha256"), str)
            or not isinstance(data.get("reason"), str)
        ):
            return JSONResponse(
                {"error": 'body must be {"model_sha256": str, "reason": str}'}, status_code=400
            )

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
        raise GateError(
            f"the retracted model {model_sha256[:12]}… is the only best ever recorded; nothing to "
            "move back to"
        )
    return gate.set_best(Path(earlier[-1]["model_path"]), "retraction", reason[:MAX_RETRACT_REASON])


async def _json_body(request: Request, cap: int = MAX_CONTROL_BYTES) -> dict[str, Any] | None:
    body = await _read_capped(request, cap)
    try:
        data = json.loads(body) if body is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _add_audit_routes(app: FastAPI, gate: Gate, lock: threading.Lock) -> None:
    @app.get("/audit/events")
    def events(after: int = 0) -> dict[str, object]:
        return {"events": gate.ledger.events_after(after)}

    @app.post("/audit/ack")
    async def ack(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if data is None or not isinstance(data.get("up_to"), int):
            return JSONResponse({"error": 'body must be {"up_to": int}'}, status_code=400)
        try:
            return JSONResponse({"dropped": gate.ledger.ack_events(int(data["up_to"]))})
        except LedgerError as exc:  # an ack past what was delivered would drop unread events
            return JSONResponse({"error": str(exc)}, status_code=409)

    @app.put("/anchor")
    async def put_anchor(request: Request) -> JSONResponse:
        data = await _json_body(request)
        ok = data is not None and isinstance(data.get("seq"), int) and isinstance(data.get("hash"), str)
        if not ok or data is None or not (data.get("run_id") is None or isinstance(data.get("run_id"), str)):
            return JSONResponse(
                {"error": "body must be {seq: int, hash: str, run_id: str|null}"}, status_code=400
            )
        try:
            gate.ledger.put_anchor(int(data["seq"]), str(data["hash"]), data.get("run_id"))
        except LedgerError as exc:  # behind the latest anchor: the log was cut or rewritten
            gate.ledger.queue_event(
                "gate.anchor_refused", {"seq": data["seq"], "hash": data["hash"], "reason": str(exc)}
            )
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse({"ok": True})

    @app.get("/anchor/history")
    def anchor_history() -> dict[str, object]:
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
        data = await _json_body(request, MAX_MILESTONE_BYTES)
        if data is None:
            return JSONResponse(
                {
                    "error": f"milestone body is not a JSON object within MAX_MILESTONE_BYTES="
                    f"{MAX_MILESTONE_BYTES}"
                },
                status_code=409,
            )
        try:
            req = MilestoneRequest.model_validate(data)

            def score() -> dict[str, object]:
                with lock:
                    if gate.integrity_check is not None:  # sealed scores only from the verified copy
                        gate.integrity_check()
                    return run_milestone(gate, req).as_json()

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


def _add_people_routes(app: FastAPI, gate: Gate, lock: threading.Lock) -> None:
    """Host-only moves that used to open the vault from the orchestrator: an A/A reference, a rotation."""

    @app.post("/reference")
    async def reference(request: Request) -> JSONResponse:
        data = await _json_body(request, MAX_UPLOAD_BYTES)
        if (
            data is None
            or not isinstance(data.get("model_b64"), str)
            or not isinstance(data.get("reason"), str)
        ):
            return JSONResponse({"error": 'body must be {"model_b64": str, "reason": str}'}, status_code=400)
        try:
            model = base64.b64decode(str(data["model_b64"]), validate=True)
        except (ValueError, binascii.Error):
            return JSONResponse({"error": "model_b64 is not base64"}, status_code=400)

        def move() -> str:
            with lock:
                return gate.set_reference(model, str(data["reason"])[:MAX_RETRACT_REASON])

        try:
            return JSONResponse({"model_sha256": await run_in_threadpool(move)})
        except Exception as exc:  # noqa: BLE001 - IntakeError, LedgerError: the reason goes back to the host
            return JSONResponse({"error": f"reference refused: {exc}"}, status_code=409)

    @app.post("/rotate")
    async def rotate(request: Request) -> JSONResponse:
        data = await _json_body(request)
        if data is None or not isinstance(data.get("tier"), str):
            return JSONResponse({"error": 'body must be {"tier": str}'}, status_code=400)

        def redraw() -> int:
            with lock:  # one worker: forking this threaded server for the generator can deadlock
                return gate.rotate(str(data["tier"]), lambda vault, tier: build_fresh(vault, tier, workers=1))

        try:
            return JSONResponse({"tier": data["tier"], "version": await run_in_threadpool(redraw)})
        except (GateError, UsageError, LedgerError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)


def serve(
    gate: Gate,
    socket_path: Path | None = None,
    host: str | None = None,
    port: int | None = None,
    token: str | None = None,
    override: Override | None = None,
    agent_token: str | None = None,
) -> None:
    """Run the service until stopped, always with both credentials and one answer time.

    Before it listens, the gate fixes its answer time (``gate.calibrate.fix_answer_time``: it
    times a reference verdict, derives the answer time or checks ``override`` against the measured
    time, and records it); a CalibrationError stops the start. On a Unix socket both credentials
    are drawn fresh and written beside it (``token_file``); on TCP the host credential is
    ``token`` (refused when missing: a gate on TCP without a token is unsafe) and the agent
    credential ``agent_token``, else a random one nobody holds.
    """
    import uvicorn

    if socket_path is None and host is None:
        raise UsageError("give --socket PATH, or --host/--port with a token")
    if host is not None and not token:
        raise UsageError(f"the gate refuses TCP without a bearer token; set ${TOKEN_ENV} or use --socket")
    answer = gate.answer_time = fix_answer_time(gate, override)
    listener = bind_unix_socket(Path(socket_path)) if socket_path is not None else None
    if socket_path is not None:
        creds = issue_credentials(Path(socket_path).parent)
    else:
        creds = Credentials(host=token, agent=agent_token or secrets.token_urlsafe(32))
    app = create_app(gate, creds.host, answer.seconds, agent_token=creds.agent)
    config = uvicorn.Config(app, log_level="warning", access_log=False, limit_concurrency=64)
    server = uvicorn.Server(config)
    if listener is not None:
        server.run(sockets=[listener])
    else:
        config.host, config.port = str(host), int(port or 0)
        server.run()
