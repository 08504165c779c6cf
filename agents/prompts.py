"""Prompts are data: one Markdown file per role under ``prompts/`` (proposer, judge, code-agent)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from segfactory.errors import PolicyError
from segfactory.home import SOURCE_ROOT

PROMPTS_DIR = SOURCE_ROOT / "prompts"
ROLES = ("proposer", "judge", "code-agent")


def load_prompt(role: str, prompts_dir: Path = PROMPTS_DIR) -> str:
    """The system prompt for ``role``; a missing or empty file is a ``PolicyError``."""
    if role not in ROLES:
        raise PolicyError(f"no prompt role {role!r}; known: {', '.join(ROLES)}")
    path = prompts_dir / f"{role}.md"
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError(f"prompt file {path} is missing: {exc}; restore it from the repository") from exc
    if not text.strip():
        raise PolicyError(f"prompt file {path} is empty")
    return text


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
