"""The web console for people: runs, approvals chat, label review, audit-log review.

Public API (docs/console.md)::

    from console import Auth, create_app
    app = create_app(home, audit_log, auth=Auth(), anchor=lambda: (anchor, True))

``review_stats(home)`` gives reports the label-review figures (reviewed, confirmed errors,
human minutes per image). Agents never reach the console; it is served on 127.0.0.1 with a token
printed at start. Importing this package imports FastAPI but not torch or LangGraph (those come
with ``create_app``).
"""

from console._auth import SESSION_TTL_S, Auth, AuthError, CsrfError
from console._chat import MAX_REPLY_CHARS, Reading, interpret
from console._interpret import make_interpreter
from console._labels import review_stats
from console.app import MAX_BODY_BYTES, create_app

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_REPLY_CHARS",
    "SESSION_TTL_S",
    "Auth",
    "AuthError",
    "CsrfError",
    "Reading",
    "create_app",
    "interpret",
    "make_interpreter",
    "review_stats",
]
