"""Protected paths: what no agent may name, read or write (trust rules 1 and 9).

The patterns are the ones ``audit check`` applies (``policies/protected_paths.yaml``, loaded by
``audit.load_policy``), so a path the agents refuse is a path the audit check flags. The
component names below hold as well, wherever they appear in a relative path.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path, PurePosixPath

from audit import load_policy
from audit.check import match_protected
from segfactory.home import SOURCE_ROOT

POLICY_DIR = SOURCE_ROOT / "policies"

# A path with any of these components is protected wherever it appears (relative or absolute).
PROTECTED_COMPONENTS: frozenset[str] = frozenset(
    {
        "vault",
        "people",
        "audit",
        "gate-pinned",
        "ledger.sqlite",
        "state.sqlite",
        ".git",
        "environ",
        "docker.sock",
        "home.json",
        "confirm-a",
        "confirm-b",
        "never-queried",
        "real-holdout",
    }
)


@lru_cache(maxsize=8)
def _patterns(home: Path | None) -> tuple[str, ...]:
    policy = load_policy()
    if home is None:
        return tuple(p for p in policy.patterns if "{home}" not in p)
    return tuple(policy.for_home(home))


def protected_pattern(path: str, home: Path | None = None) -> str | None:
    """The pattern or component that makes ``path`` protected, or None."""
    hit = next((part for part in PurePosixPath(path).parts if part in PROTECTED_COMPONENTS), None)
    if hit is not None:
        return hit
    return match_protected(path, list(_patterns(home)))


def is_protected(path: str, home: Path | None = None) -> bool:
    return protected_pattern(path, home) is not None
