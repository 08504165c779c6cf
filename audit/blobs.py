"""Content-addressed payloads: ``<home>/audit/blobs/<sha256>``, referenced as ``blob:<sha256>``.

A blob's name is the SHA-256 of its bytes, so a reference in a hashed audit record pins the
blob's content too; ``audit verify`` re-hashes every referenced blob.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from segfactory.errors import DataError, UsageError
from segfactory.files import write_atomic
from segfactory.records import canonical_json

BLOB_PREFIX = "blob:"
BLOB_REF = re.compile(r"^blob:([0-9a-f]{64})$")
INLINE_MAX_BYTES = 4 * 1024  # a payload value whose canonical JSON is larger becomes a blob reference


class BlobStore:
    """Write-once files named by their SHA-256. Writes are atomic and fsynced."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, ref: str) -> Path:
        match = BLOB_REF.match(ref)
        if not match:
            raise UsageError(f"not a blob reference: {ref!r}; expected 'blob:' and 64 hex digits")
        return self.root / match.group(1)

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its reference ``blob:<sha256>``."""
        digest = hashlib.sha256(data).hexdigest()
        final = self.root / digest
        if final.is_file():
            return BLOB_PREFIX + digest
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(final, data, mode=0o640)
        _fsync_dir(self.root)
        return BLOB_PREFIX + digest

    def get(self, ref: str) -> bytes:
        """The bytes behind ``ref``; raises DataError when missing or when they do not hash to it."""
        path = self.path_for(ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise DataError(f"blob {ref} is missing from {self.root}") from exc
        if hashlib.sha256(data).hexdigest() != path.name:
            raise DataError(f"blob {ref} at {path} does not hash to its name; it was altered")
        return data

    def check(self, ref: str) -> str | None:
        """None when ``ref`` is present and intact, else a one-line problem."""
        try:
            self.get(ref)
        except DataError as exc:
            return str(exc)
        return None

    def externalise(self, payload: Mapping[str, object]) -> dict[str, object]:
        """``payload`` with every top-level value larger than INLINE_MAX_BYTES stored as a blob.

        The blob holds the value's canonical JSON; the record keeps ``blob:<sha256>``.
        """
        out: dict[str, object] = {}
        for key, value in payload.items():
            encoded = canonical_json(value)
            out[key] = self.put(encoded) if len(encoded) > INLINE_MAX_BYTES else value
        return out


def blob_refs(value: Any) -> list[str]:
    """Every ``blob:<sha256>`` string anywhere inside a JSON value."""
    if isinstance(value, str):
        return [value] if BLOB_REF.match(value) else []
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in blob_refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in blob_refs(item)]
    return []


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
