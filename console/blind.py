"""The blind test: shuffled real and synthetic crops, a person guesses which is which.

Pages: ``/blind`` (start a session, list past ones) and ``/blind/{id}`` (one unlabelled crop at a
time with two buttons, then the accuracy). The JSON API under ``/api/blind`` does the same for
scripts. ``console.app.create_app`` mounts ``router``. Sessions are ``analysis.realism.blind``
records under ``<home>/runs/blind/people/`` (people only). The crop PNG served here is the only
place a real crop is shown, to the person at the console; it is never logged. Every session start
and guess is an audit record (actor ``human``) holding the session id, trial number and guess,
never pixels.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from analysis.realism import blind
from console._auth import Auth
from console._services import page
from segfactory.errors import UsageError
from synthetic.versions import resolve

router = APIRouter()
BLIND_RUN = "blind"  # sessions live in runs/blind/people/
VIEW_PX = 256  # on-screen side of a shown crop, pixels (the crop is scaled up, unsmoothed)
MAX_LISTED = 50  # sessions listed on /blind, newest first
SESSION_ID = re.compile(r"^[0-9a-f]{4,32}$")  # blind.new_session ids are hex tokens


def _people(request: Request) -> Path:
    people: Path = request.app.state.services.home.people_dir(BLIND_RUN)
    return people


def _session(request: Request, session_id: str) -> Any:
    if not SESSION_ID.match(session_id):
        raise UsageError(f"{session_id!r} is not a blind-test session id (hex, as /blind lists them)")
    return blind.load(_people(request), session_id)


def _split_dir(request: Request, ref: str) -> Path:
    """A split folder, or a dataset version ``NAME/vK`` of the home (its train split)."""

    path = Path(ref)
    if (path / "manifest.json").is_file():
        return path
    return resolve(request.app.state.services.home.root, ref).train


def _start(request: Request, synthetic: str, real: str, n: int) -> Any:
    session = blind.new_session(_split_dir(request, synthetic), Path(real), n)
    blind.save(session, _people(request))
    _audit(request, "blind_session_started", {"session": session.id, "trials": len(session.trials)})
    return session


async def _body(request: Request) -> dict[str, object]:
    Auth.check_csrf(request.state.session, request.headers.get("x-csrf-token"))
    body = await request.json()
    if not isinstance(body, dict):
        raise UsageError("the request body must be a JSON object")
    return body


def _audit(request: Request, event: str, payload: Mapping[str, object]) -> None:
    services = request.app.state.services
    services.sink.append("human", event, {"person": services.person, **payload}, run_id=BLIND_RUN)


@router.post("/api/blind")
async def start(request: Request) -> JSONResponse:
    """Body ``{"synthetic": split dir, "real": real-dev dir, "n": trials}``; answers id and count."""
    body = await _body(request)
    session = _start(request, str(body.get("synthetic")), str(body.get("real")), _trials(body.get("n", 40)))
    return JSONResponse({"id": session.id, "trials": len(session.trials), "side": session.side})


@router.get("/api/blind/{session_id}/crop/{k}.png")
def crop_png(request: Request, session_id: str, k: int) -> Response:
    """Trial ``k``'s crop as an 8-bit PNG, for the person's screen only."""
    from PIL import Image

    session = _session(request, session_id)
    if not 0 <= k < len(session.trials):
        raise UsageError(f"trial {k} does not exist; the session has {len(session.trials)}")
    pixels = np.round(np.clip(blind.crop(session, k), 0, 1) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return Response(buffer.getvalue(), media_type="image/png")


@router.post("/api/blind/{session_id}/guess/{k}")
async def guess(request: Request, session_id: str, k: int) -> JSONResponse:
    """Body ``{"guess": "real" | "synthetic"}``; answers how many trials are answered."""

    body = await _body(request)
    session = _guess(request, session_id, k, str(body.get("guess")))
    return JSONResponse(
        {"answered": sum(t.guess is not None for t in session.trials), "trials": len(session.trials)}
    )


def _guess(request: Request, session_id: str, k: int, choice: str) -> Any:
    session = blind.record_guess(_session(request, session_id), k, choice)
    blind.save(session, _people(request))
    _audit(request, "blind_guess", {"session": session_id, "trial": k, "guess": choice})
    return session


@router.get("/api/blind/{session_id}/result")
def result(request: Request, session_id: str) -> JSONResponse:
    """The person's accuracy with a 95% Wilson interval (aggregates only)."""

    return JSONResponse(blind.score(_session(request, session_id)))


def _trials(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"the number of trials must be a whole number; got {value!r}") from None


# --- pages ------------------------------------------------------------------------------------


@router.get("/blind")
def blind_page(request: Request) -> Response:
    """Start form and the past sessions' aggregate results (newest first)."""

    people = _people(request)
    files = sorted(people.glob("blind-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_LISTED]
    sessions = [blind.score(blind.load(people, f.stem.removeprefix("blind-"))) for f in files]
    return page(request, "blind.html", {"sessions": sessions, "max_trials": blind.MAX_TRIALS})


@router.post("/blind")
async def blind_start_form(request: Request) -> Response:
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    Auth.check_csrf(request.state.session, fields.get("csrf"))
    session = _start(
        request, fields.get("synthetic", ""), fields.get("real", ""), _trials(fields.get("n", ""))
    )
    return RedirectResponse(f"/blind/{session.id}", status_code=303)


@router.get("/blind/{session_id}")
def blind_trial_page(request: Request, session_id: str) -> Response:
    """The first unanswered crop (no label anywhere on the page), or the result when all are answered."""

    session = _session(request, session_id)
    k = next((i for i, t in enumerate(session.trials) if t.guess is None), None)
    return page(
        request,
        "blind_trial.html",
        {
            "sid": session.id,
            "k": k,
            "trials": len(session.trials),
            "view_px": VIEW_PX,
            "result": blind.score(session),
        },
    )


@router.post("/blind/{session_id}/guess/{k}")
async def blind_guess_form(request: Request, session_id: str, k: int) -> Response:
    form = await request.form()
    fields = {key: v for key, v in form.items() if isinstance(v, str)}
    Auth.check_csrf(request.state.session, fields.get("csrf"))
    _guess(request, session_id, k, fields.get("guess", ""))
    return RedirectResponse(f"/blind/{session_id}", status_code=303)
