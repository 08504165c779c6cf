"""What the console's routes share: ``Services`` (built once per app) and ``page`` (render a
template with the session's CSRF token). Apart from ``console.app``, which builds the app from
the routers that use them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from console._auth import Auth
from segfactory.home import Home
from segfactory.records import Anchor

AnchorReader = Callable[[], tuple[Anchor | None, bool]]  # (anchor, whether an anchor store was consulted)


@dataclass
class Services:
    """What the routes use; built once per app."""

    home: Home
    auth: Auth
    sink: Any  # audit.AuditLog (or any AuditSink)
    anchor: AnchorReader
    person: str
    templates: Jinja2Templates
    approvals: Any  # console._approvals.ApprovalsDesk
    labels: Any  # console._labels.LabelDesk


def page(request: Request, name: str, context: Mapping[str, object], status: int = 200) -> HTMLResponse:
    """Render a template with the session's CSRF token in its context."""
    services: Services = request.app.state.services
    session = request.state.session
    response: HTMLResponse = services.templates.TemplateResponse(
        request, name, {"csrf": session.csrf, "person": services.person, **context}, status_code=status
    )
    return response


__all__ = ["AnchorReader", "Services", "page"]
