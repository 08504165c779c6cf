"""An in-memory audit sink with the same contract as ``audit.AuditLog`` (append + put_blob)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemorySink:
    records: list[dict[str, Any]] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def append(self, actor: Any, event: str, payload: dict[str, Any], run_id: str | None = None) -> None:
        self.records.append({"actor": str(actor), "event": event, "payload": payload, "run_id": run_id})

    def put_blob(self, data: bytes) -> str:
        ref = "blob:" + hashlib.sha256(data).hexdigest()
        self.blobs[ref] = bytes(data)
        return ref

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r["payload"] for r in self.records if r["event"] == name]
