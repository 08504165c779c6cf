"""Rendering untrusted text inert: terminal escapes and control characters made visible.

HTML is escaped by Jinja's autoescape; this module handles what autoescape does not: ESC
sequences, other C0/C1 controls, bidi overrides. Each becomes a visible ``\\xNN`` / ``\\u202e``
token, so a payload can neither colour a terminal it is copied into nor reorder the text a
person reads. Prompt-injection text needs nothing more: the console never feeds it to a model.
"""

from __future__ import annotations

import json
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """``text`` with every control or bidi character written out; newlines and tabs kept."""
    return _CONTROL.sub(_visible, text)


def pretty(payload: Any) -> str:
    """A payload as indented JSON (non-ASCII kept readable), made inert."""
    return inert(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False, default=str))
