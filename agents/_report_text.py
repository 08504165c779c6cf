"""How a value enters the run report's Markdown: one door for text, one for code, one way to cut.

The report's sentences are Markdown written here; every value put into them (a hypothesis, a
reason, a ticket id, a path) is text, not Markdown. Hypotheses and change patches come from a
proposer (an LLM), reasons from the judge, the runner or a sandbox, so a value could hold
Markdown that links to a remote image, breaks a table or opens a code span. ``inert`` is the one
place such text passes through; ``text`` and ``code`` build on it and make the value literal in
its place, so the HTML, rendered by markdown-it with raw HTML off, shows it as written.

``clip`` shortens a value for a table cell at a word boundary and marks the cut with an ellipsis;
the report gives every clipped value in full elsewhere (the ticket list).
"""

from __future__ import annotations

import re

from segfactory.text import inert as visible

ELLIPSIS = "…"
NOT_MEASURED = "n/a"  # a number the records do not hold
SHA_SHOWN = 10  # hex digits of a model's sha256 in the text
MIN_KEPT_SHARE = 0.5  # clip keeps at least this share of its limit before it looks for a boundary

# What starts Markdown inline markup: emphasis, code, links and images, a table cell's end, an
# autolink or raw HTML (``<`` before a letter, ``/``, ``!`` or ``?``) and an entity (``&`` before a
# letter or ``#``). Other punctuation stays as it is, so report.md reads as plain text.
_MARKUP = re.compile(r"([\\`*\[\]|]|<(?=[A-Za-z/!?])|&(?=[A-Za-z#]))")
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")  # `_x_` emphasises, `batch_size` not
_WORD = re.compile(r"\w")


def inert(value: object) -> str:
    """Any value as one line of plain text: control, separator and bidi characters written out as
    visible tokens (``segfactory.text.inert``), then every run of whitespace is one space.

    The one point where text a sandbox, an LLM or a person wrote enters the report: whatever
    else such text needs before people read it belongs here.
    """
    return " ".join(visible(str(value), multiline=False).split())


def clip(value: str, limit: int) -> str:
    """``value`` cut to at most ``limit`` characters between two words, ending in an ellipsis.

    The cut falls at the last space in the kept part, else after the last character that is not
    a letter or digit (``batch_size=`` rather than ``batch_size=3``). Only a value whose first
    ``limit`` characters hold no such boundary at all is cut inside it.
    """
    if len(value) <= limit:
        return value
    kept = value[: max(limit - len(ELLIPSIS), 1)]
    space = kept.rfind(" ")
    if space >= limit * MIN_KEPT_SHARE:
        return kept[:space].rstrip(" ,;:") + ELLIPSIS
    for end in range(len(kept), 0, -1):  # the last end with a non-word character on either side
        if not (_WORD.match(kept[end - 1]) and _WORD.match(value[end])):
            return kept[:end].rstrip() + ELLIPSIS
    return kept + ELLIPSIS


def text(value: object, limit: int | None = None) -> str:
    """``value`` as literal Markdown text (safe inside a table cell), clipped to ``limit``."""
    plain = inert(value)
    if limit is not None:
        plain = clip(plain, limit)
    return _EDGE_UNDERSCORE.sub(r"\\_", _MARKUP.sub(r"\\\1", plain))


def code(value: object, limit: int | None = None, *, cell: bool = False) -> str:
    """``value`` as a Markdown code span, clipped to ``limit``; ``cell``: it sits in a table row."""
    plain = inert(value)
    if limit is not None:
        plain = clip(plain, limit)
    ticks = max((len(run) for run in re.findall(r"`+", plain)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if plain.startswith("`") or plain.endswith("`") else ""
    span = f"{fence}{pad}{plain}{pad}{fence}"
    return span.replace("|", "\\|") if cell else span  # a table splits its row at every bare pipe


def number(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else NOT_MEASURED


def sha_text(sha: str | None) -> str:
    """A model's sha256, shortened, as code."""
    return code(sha[:SHA_SHOWN]) if sha else NOT_MEASURED


def ticket_text(run_id: str, ticket_id: str | None) -> str:
    """A ticket id as text, without ``run_id`` in front (the report's title names the run)."""
    tid = ticket_id or ""
    return text(tid.removeprefix(f"{run_id}-") if tid.startswith(f"{run_id}-t") else tid)


__all__ = ["ELLIPSIS", "NOT_MEASURED", "clip", "code", "inert", "number", "sha_text", "text", "ticket_text"]
