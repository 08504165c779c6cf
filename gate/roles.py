"""The gate's two credentials and what each reaches (shared by the service and its client).

The **agent** credential reaches ``AGENT_ROUTES`` only: submit a model, read the status. The
**host** credential (orchestrator, audit writer, a person's CLI) reaches every endpoint: the
audit queue, anchors, milestones, promotion, retraction, A/A references and rotation. On a Unix
socket the served gate leaves each credential beside the socket in ``token_file(dir, role)``.
"""

from __future__ import annotations

from pathlib import Path

from segfactory.errors import UsageError

HOST, AGENT = "host", "agent"
ROLES = (HOST, AGENT)
AGENT_ROUTES = frozenset({("POST", "/submit"), ("GET", "/status")})


def token_file(directory: Path, role: str) -> Path:
    """Where ``serve`` leaves the credential of ``role`` for clients of a Unix socket."""
    if role not in ROLES:
        raise UsageError(f"gate role {role!r} is unknown; known: {', '.join(ROLES)}")
    return Path(directory) / f"{role}.token"
