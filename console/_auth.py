"""The console's one local token, its sessions and CSRF tokens.

A token is made at start (``secrets.token_urlsafe``) and printed once. A person logs in with
``/login?token=T``: the token is compared in constant time, and a session cookie
(``HttpOnly; SameSite=Strict``) replaces it. Scripts may send ``Authorization: Bearer T``
instead. Every form carries the session's own CSRF token, checked on POST; a bearer request
has no cookie to ride on, so it needs none. Sessions live in memory and expire after
SESSION_TTL_S; an unknown or expired session is a 401.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass

SESSION_TTL_S = 12 * 3600  # past this a session is unknown and the person logs in again
MAX_SESSIONS = 256  # past this the oldest session is dropped
COOKIE = "sf_session"
TOKEN_BYTES = 32  # random bytes in the console token (about 43 URL-safe characters)


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    created: float
    via_bearer: bool = False


class AuthError(Exception):
    """No valid token or session: the request is answered 401."""


class CsrfError(Exception):
    """A cookie-authenticated POST without its session's CSRF token: answered 403."""


class Auth:
    """The token and the sessions it opened."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(TOKEN_BYTES)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._now = time.time

    def token_ok(self, given: str | None) -> bool:
        if not given:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def login(self, given: str | None) -> Session:
        """A new session for the right token; AuthError otherwise."""
        if not self.token_ok(given):
            raise AuthError("unknown token")
        session = Session(secrets.token_urlsafe(TOKEN_BYTES), secrets.token_urlsafe(TOKEN_BYTES), self._now())
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                oldest = min(self._sessions.values(), key=lambda s: s.created)
                del self._sessions[oldest.id]
            self._sessions[session.id] = session
        return session

    def session(self, cookie: str | None, authorization: str | None) -> Session:
        """The session of a request (bearer header or cookie); AuthError when there is none."""
        if authorization and authorization.lower().startswith("bearer "):
            if self.token_ok(authorization[7:].strip()):
                return Session("bearer", "", self._now(), via_bearer=True)
            raise AuthError("unknown token")
        if not cookie:
            raise AuthError("not logged in")
        with self._lock:
            found = self._sessions.get(cookie)
            if found is None:
                raise AuthError("unknown session")
            if self._now() - found.created > SESSION_TTL_S:
                del self._sessions[cookie]
                raise AuthError("session expired")
        return found

    def expire_all(self) -> None:
        """Forget every session (tests; a restart does the same)."""
        with self._lock:
            self._sessions.clear()

    @staticmethod
    def check_csrf(session: Session, given: str | None) -> None:
        if session.via_bearer:
            return
        if not given or not hmac.compare_digest(given.encode(), session.csrf.encode()):
            raise CsrfError("missing or wrong CSRF token; reload the page and try again")
