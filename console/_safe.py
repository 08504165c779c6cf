"""Rendering untrusted text inert: terminal escapes and control characters made visible.

HTML is escaped by Jinja's autoescape; this module handles what autoescape does not: ESC
sequences, other C0/C1 controls, bidi overrides. Each becomes a visible ``\\xNN`` / ``\\u202e``
token (``segfactory.text.inert``, the one function every printer and renderer uses), so a
payload can neither colour a terminal it is copied into nor reorder the text a person reads.
:func:`finalize` applies it to every value a template prints, so a template that forgets the
``inert`` filter still shows nothing raw. Prompt-injection text needs nothing more: the console
never feeds it to a model.
"""

from __future__ import annotations

import json
from typing import Any

from segfactory.text import inert


def finalize(value: Any) -> Any:
    """Jinja's ``finalize``: every printed string made inert, an already-safe one kept safe."""
    if hasattr(value, "__html__"):  # markupsafe.Markup: already escaped, so stays marked safe
        return type(value)(inert(str(value)))
    return inert(value) if isinstance(value, str) else value


def pretty(payload: Any) -> str:
    """A payload as indented JSON (non-ASCII kept readable), made inert."""
    return inert(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False, default=str))


__all__ = ["finalize", "inert", "pretty"]
