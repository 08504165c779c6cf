"""The blind test page's API: shuffled real and synthetic crops, a person guesses which is which.

Mount with ``app.include_router(console.blind.router)`` in ``console.app.create_app``. Sessions
are ``synthetic.realism.blind`` records under ``<home>/runs/blind/people/`` (people only). The
crop PNG served here is the only place a real crop is shown, to the person at the console; it
is never logged. Every session start and guess is an audit record (actor ``human``) holding the
session id, trial number and guess, never pixels.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from console._auth import Auth
from segfactory.errors import UsageError

router = APIRouter()
BLIND_RUN = "blind"  # sessions live in runs/blind/people/


def _people(request: Request) -> Path:
    people: Path = request.app.state.services.home.people_dir(BLIND_RUN)
    return people


async def _body(request: Request) -> dict[str, Any]:
    Auth.check_csrf(request.state.session, request.headers.get("x-csrf-token"))
    body = await request.json()
    if not isinstance(body, dict):
        raise UsageError("the request body must be a JSON object")
    return body


def _audit(request: Request, event: str, payload: dict[str, Any]) -> None:
    services = request.app.state.services
    services.sink.append("human", event, {"person": services.person, **payload}, run_id=BLIND_RUN)


@router.post("/api/blind")
async def start(request: Request) -> JSONResponse:
    """Body ``{"synthetic": split dir, "real": real-dev dir, "n": trials}``; answers id and count."""
    from synthetic.realism import blind

    body = await _body(request)
    session = blind.new_session(Path(str(body.get("synthetic"))), Path(str(body.get("real"))), int(body.get("n", 40)))
    blind.save(session, _people(request))
    _audit(request, "blind_session_started", {"session": session.id, "trials": len(session.trials)})
    return JSONResponse({"id": session.id, "trials": len(session.trials), "side": session.side})


@router.get("/api/blind/{session_id}/crop/{k}.png")
def crop_png(request: Request, session_id: str, k: int) -> Response:
    """Trial ``k``'s crop as an 8-bit PNG, for the person's screen only."""
    from PIL import Image

    from synthetic.realism import blind

    session = blind.load(_people(request), session_id)
    if not 0 <= k < len(session.trials):
        raise UsageError(f"trial {k} does not exist; the session has {len(session.trials)}")
    pixels = np.round(np.clip(blind.crop(session, k), 0, 1) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return Response(buffer.getvalue(), media_type="image/png")


@router.post("/api/blind/{session_id}/guess/{k}")
async def guess(request: Request, session_id: str, k: int) -> JSONResponse:
    """Body ``{"guess": "real" | "synthetic"}``; answers how many trials are answered."""
    from synthetic.realism import blind

    body = await _body(request)
    people = _people(request)
    session = blind.record_guess(blind.load(people, session_id), k, str(body.get("guess")))
    blind.save(session, people)
    _audit(request, "blind_guess", {"session": session_id, "trial": k, "guess": body.get("guess")})
    return JSONResponse({"answered": sum(t.guess is not None for t in session.trials), "trials": len(session.trials)})


@router.get("/api/blind/{session_id}/result")
def result(request: Request, session_id: str) -> JSONResponse:
    """The person's accuracy with a 95% Wilson interval (aggregates only)."""
    from synthetic.realism import blind

    return JSONResponse(blind.score(blind.load(_people(request), session_id)))
