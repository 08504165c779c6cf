"""Attachments (error crops and the like): loaded in full before any prompt is sent.

A missing expected attachment is a ``DataError``; one over :data:`MAX_ATTACHMENT_BYTES` (or a
request with more than :data:`MAX_ATTACHMENTS`) is ``LimitExceeded``. Both fail before any
request leaves the host, so a prompt is never sent without what it refers to.
"""

from __future__ import annotations

from pathlib import Path

from agents.llm._types import Attachment
from segfactory.errors import DataError, LimitExceeded

MAX_ATTACHMENT_BYTES = 5 * 1024**2  # per image: the stricter vendor limit (Anthropic); past it: LimitExceeded
MAX_ATTACHMENTS = 20  # per request; past it: LimitExceeded
MEDIA_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def load_attachment(path: Path) -> Attachment:
    """Read one expected image attachment, or fail loudly."""
    media_type = MEDIA_TYPES.get(path.suffix.lower())
    if media_type is None:
        raise DataError(f"attachment {path} has an unsupported type; expected one of {sorted(MEDIA_TYPES)}")
    if not path.is_file():
        raise DataError(
            f"expected attachment {path} is missing; the prompt was not sent. "
            "Re-run the analysis that writes it."
        )
    size = path.stat().st_size
    if size > MAX_ATTACHMENT_BYTES:
        raise LimitExceeded(
            f"attachment {path} is {size} bytes, over MAX_ATTACHMENT_BYTES="
            f"{MAX_ATTACHMENT_BYTES}; the prompt was not sent. Shrink or crop the image."
        )
    return Attachment(name=path.name, media_type=media_type, data=path.read_bytes())


def load_attachments(paths: list[Path]) -> tuple[Attachment, ...]:
    if len(paths) > MAX_ATTACHMENTS:
        raise LimitExceeded(
            f"{len(paths)} attachments, over MAX_ATTACHMENTS={MAX_ATTACHMENTS}; the prompt was not sent"
        )
    return tuple(load_attachment(p) for p in paths)
