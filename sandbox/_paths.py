"""Which host paths may be mounted into a sandbox (trust rule 1).

Never: the repo root (or anything containing it), a factory home's root, vault, audit log or
state, a run's ``people/`` folder, the docker socket (or anything containing it). Allowed inside a
home: ``datasets/`` and the folders of a run other than ``people/`` (``runs/<id>/tickets/...``),
where dataset versions and workspaces live; never ``runs/`` or ``runs/<id>/`` themselves, which
contain ``people/``.
"""

from __future__ import annotations

from pathlib import Path

from segfactory.errors import PolicyError
from segfactory.home import HOME_MARKER, SOURCE_ROOT, default_home

DOCKER_SOCKETS = (Path("/var/run/docker.sock"), Path("/run/docker.sock"))
HOME_MOUNTABLE = ("datasets", "runs")  # top-level home folders a sandbox may see (in part)


def _contains(outer: Path, inner: Path) -> bool:
    return inner == outer or outer in inner.parents


def _enclosing_home(path: Path) -> Path | None:
    for candidate in (path, *path.parents):
        if (candidate / HOME_MARKER).is_file():
            return candidate
    return None


def _home_reason(path: Path) -> str | None:
    home = _enclosing_home(path)
    if home is None:
        return None
    parts = path.relative_to(home).parts
    if not parts or parts[0] not in HOME_MOUNTABLE:
        return f"the factory home {home} (only its {' and '.join(HOME_MOUNTABLE)} folders may be mounted)"
    if parts[0] == "runs" and len(parts) < 3:  # runs/ and runs/<id>/ hold each run's people/
        return (
            f"{'the runs folder' if len(parts) == 1 else 'a whole run'}, which holds people/ "
            "(mount a ticket's folder)"
        )
    if parts[0] == "runs" and parts[2] == "people":
        return "a run's people/ folder (for people only)"
    return None


def forbidden_reason(path: Path) -> str | None:
    """Why ``path`` may not be mounted into a sandbox, or None when it may."""
    real = path.resolve()
    if _contains(real, SOURCE_ROOT):
        return f"the repository root {SOURCE_ROOT} (mount package directories, never the root)"
    for sock in DOCKER_SOCKETS:
        if _contains(real, sock) or _contains(real, sock.resolve()):
            return "the docker socket"
    default = default_home().resolve()
    if _contains(real, default):
        return f"the default factory home {default}"
    return _home_reason(real)


def check_mountable(path: Path, role: str) -> Path:
    """Resolve ``path`` and raise PolicyError when it must never be mounted; returns it resolved."""
    reason = forbidden_reason(path)
    if reason is not None:
        raise PolicyError(f"refusing to mount {path} as {role}: it is {reason}")
    return path.resolve()
