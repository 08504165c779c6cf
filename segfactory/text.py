"""Untrusted text made inert before a person's terminal, page or report shows it.

Text from a sandbox (a worker's stderr, the names of files it made) or from a language model
(a hypothesis, a judge's reason) may carry ESC sequences that recolour, retitle or rewrite the
terminal that prints them, a carriage return that overwrites a line, a newline that forges one,
or a bidi override that reorders what a person reads. :func:`inert` writes every such character
out as a visible token (``\\x1b``, ``\\u202e``), so the payload shows as what it is and does
nothing. Everywhere such text is printed or rendered (progress lines, failure reasons, the run
report, ``segfactory report``, the console) it goes through this one function; the audit log
keeps the original bytes.

Written out: C0 controls (tab kept; newline kept only with ``multiline=True``), DEL, C1
controls (U+0080-U+009F, which include the 8-bit CSI), zero-width and direction marks
(U+200B-U+200F), the line and paragraph separators (U+2028, U+2029) and the bidi embeddings,
overrides and isolates (U+202A-U+202E, U+2066-U+2069). An ESC sequence is made harmless by
writing out its ESC; the rest of it is plain text.
"""

from __future__ import annotations

import re
from typing import Any

_OTHERS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL_MULTILINE = re.compile(f"[{_OTHERS}]")  # newline and tab kept
_CONTROL_ONE_LINE = re.compile(f"[\n{_OTHERS}]")  # tab kept


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str, *, multiline: bool = True) -> str:
    """``text`` with every control, separator or bidi character written out as a visible token.

    ``multiline=False`` writes newlines out too: for one-line places (a progress line, a failure
    reason, a table cell), where a newline from the payload would start a line of its own.
    Idempotent: what it returns holds none of those characters.
    """
    pattern = _CONTROL_MULTILINE if multiline else _CONTROL_ONE_LINE
    return pattern.sub(_visible, text)


def inert_tree(value: Any, *, multiline: bool = False) -> Any:
    """``value`` with :func:`inert` applied to every string in it, dictionary keys included
    (dicts, lists and tuples are copied; anything else is returned as it is)."""
    if isinstance(value, str):
        return inert(value, multiline=multiline)
    if isinstance(value, dict):
        return {
            inert_tree(k, multiline=multiline): inert_tree(v, multiline=multiline) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(inert_tree(v, multiline=multiline) for v in value)
    return value


__all__ = ["inert", "inert_tree"]
