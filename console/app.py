"""The console's FastAPI app: auth on every path, security headers, errors as pages.

``create_app(home, ...)`` builds the app; ``segfactory console`` serves it with uvicorn on
127.0.0.1. Pages are rendered on the server with Jinja2 (autoescape on) and the only script
and style sheet are served from ``console/static`` (no CDN). Every path but ``/login`` needs the
session cookie or ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from agents.approvals import ApprovalQueue
from console._approvals import ApprovalsDesk
from console._auth import COOKIE, SESSION_TTL_S, Auth, AuthError, CsrfError
from console._labels import LabelDesk, StaleEdit
from console._pages import router
from console._safe import finalize, inert
from console._services import AnchorReader, Services
from console.blind import router as blind_router
from segfactory.errors import LimitExceeded, SegfactoryError
from segfactory.home import Home

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
MAX_BODY_BYTES = 8 * 1024**2  # a request body larger than this is refused with 413 before it is read
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; script-src 'self'; style-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def create_app(
    home: Home,
    sink: Any,
    *,
    auth: Auth | None = None,
    anchor: AnchorReader | None = None,
    person: str | None = None,
    interpreter: Any = None,
) -> FastAPI:
    """The console for ``home``; ``sink`` writes the audit records of people's decisions.

    ``interpreter`` reads chat replies (``console._interpret``; default: the rules)."""
    home.root.mkdir(parents=True, exist_ok=True)
    from jinja2 import Environment, FileSystemLoader

    env = Environment(  # every value HTML-escaped, and its control characters written out
        loader=FileSystemLoader(HERE / "templates"), autoescape=True, finalize=finalize
    )
    env.filters["inert"] = inert  # the same, where a template says so
    templates = Jinja2Templates(env=env)
    services = Services(
        home=home,
        auth=auth or Auth(),
        sink=sink,
        anchor=anchor or (lambda: (None, False)),
        person=person or _person(),
        templates=templates,
        approvals=ApprovalsDesk(home, ApprovalQueue(home.state_db, sink), sink, interpreter),
        labels=LabelDesk(home, sink),
    )
    app = FastAPI(title="segfactory console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.services = services
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.include_router(router)

    app.include_router(blind_router)  # the blind test: /blind pages and /api/blind
    app.middleware("http")(_guard)
    _handlers(app)
    return app


def _person() -> str:
    """Who decides in this console: the login name of the user who started it."""
    try:
        return f"human:{getpass.getuser()}"
    except (KeyError, OSError):  # a container user without a passwd entry
        return "human:console"


async def _guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Body size, login, authentication, then security headers on every response."""
    services: Services = request.app.state.services
    if request.method == "POST":
        length = request.headers.get("content-length", "")
        if not length.isdigit():
            return _error(request, 411, "a POST needs a Content-Length (a whole number of bytes)")
        if int(length) > MAX_BODY_BYTES:
            return _error(request, 413, f"the request body holds {length} bytes, more than {MAX_BODY_BYTES}")
    if request.url.path == "/login":
        response = _login(request, services)
    else:
        try:
            request.state.session = services.auth.session(
                request.cookies.get(COOKIE), request.headers.get("authorization")
            )
        except AuthError as exc:
            return _error(
                request, 401, f"{exc}: open the link with ?token= that `segfactory console` printed"
            )
        response = await call_next(request)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


def _login(request: Request, services: Services) -> Response:
    try:
        session = services.auth.login(request.query_params.get("token"))
    except AuthError:
        return _error(request, 401, "unknown token: use the link `segfactory console` printed at start")
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, session.id, max_age=SESSION_TTL_S, httponly=True, samesite="strict", path="/")
    return response


def _error(request: Request, status: int, message: str) -> Response:
    """An error as JSON for /api/ paths and bearer callers, else as a page."""
    if request.url.path.startswith("/api/") or "authorization" in request.headers:
        return JSONResponse({"error": message, "status": status}, status_code=status)
    services: Services = request.app.state.services
    return services.templates.TemplateResponse(
        request, "error.html", {"status": status, "message": message}, status_code=status
    )


def _status_for(exc: SegfactoryError) -> int:
    if isinstance(exc, StaleEdit):
        return 409
    if isinstance(exc, LimitExceeded):
        return 413
    return 400


def _handlers(app: FastAPI) -> None:
    async def segfactory_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SegfactoryError)
        return _error(request, _status_for(exc), str(exc))

    async def csrf_error(request: Request, exc: Exception) -> Response:
        return _error(request, 403, str(exc))

    app.add_exception_handler(SegfactoryError, segfactory_error)
    app.add_exception_handler(CsrfError, csrf_error)
