"""Where the audit chain's head is anchored, outside the log's own trust domain.

An anchor is the pair (seq, hash) of the chain head at some moment. Whoever can rewrite the log
can also recompute every hash in it, so a chain alone proves nothing against its own writer; the
anchor, kept by the gate in its ledger, is what catches a fully re-hashed chain or a cut tail.

``GateAnchorStore`` is the real one. ``MemoryAnchorStore`` and ``FileAnchorStore`` exist for
tests and local tooling only: an anchor in the same trust domain as the log is not a real anchor.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from segfactory.errors import DataError, GateError, HomeError
from segfactory.home import Home


class Anchor(BaseModel):
    """The chain head as the anchor store last recorded it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(ge=0)
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    ts: float | None = None
    run_id: str | None = None


@runtime_checkable
class AnchorStore(Protocol):
    """Keeps the latest anchored chain head.

    ``put`` records (seq, hash) durably before it returns, or raises (a GateError or OSError)
    without recording anything. ``get`` returns the latest anchor, or None when nothing was
    ever anchored. Stores do not judge the anchor; ``audit verify`` does.
    """

    def put(self, seq: int, hash: str, run_id: str | None) -> None: ...

    def get(self) -> Anchor | None: ...


class MemoryAnchorStore:
    """Tests only: an anchor held in the writer's own memory (not a real anchor)."""

    def __init__(self) -> None:
        self._latest: Anchor | None = None
        self.history: list[Anchor] = []
        self._lock = threading.Lock()

    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        anchor = Anchor(seq=seq, hash=hash, ts=time.time(), run_id=run_id)
        with self._lock:
            self._latest = anchor
            self.history.append(anchor)

    def get(self) -> Anchor | None:
        return self._latest


class FileAnchorStore:
    """Tests and local tooling only: the anchor as a JSON file (same trust domain: not a real anchor).

    Writes are atomic (temp file, fsync, rename), so a reader sees the old or the new anchor.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        anchor = Anchor(seq=seq, hash=hash, ts=time.time(), run_id=run_id)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "w") as fh:
            fh.write(anchor.model_dump_json())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def get(self) -> Anchor | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            return Anchor.model_validate_json(text)
        except ValueError as exc:
            raise DataError(f"anchor file {self.path} is not an anchor: {exc}; restore it or remove it") from exc


class GateAnchorClient(Protocol):
    """The part of ``gate.client.GateClient`` the anchor store uses (``PUT``/``GET /anchor``)."""

    def put_anchor(self, seq: int, hash: str, run_id: str | None) -> Any: ...

    def get_anchor(self) -> Any: ...


class GateAnchorStore:
    """The real anchor: the chain head stored in the gate's ledger (append-only history there).

    Errors from the client (gate down, refused) propagate unchanged; the writer decides what a
    failed anchoring means (see ``audit.AuditLog``).
    """

    def __init__(self, client: GateAnchorClient) -> None:
        self.client = client

    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        self.client.put_anchor(seq, hash, run_id)

    def get(self) -> Anchor | None:
        return anchor_from_reply(self.client.get_anchor())


def anchor_from_reply(reply: Any) -> Anchor | None:
    """An Anchor from whatever the gate client returned: None, a mapping, a model or JSON text."""
    if reply is None:
        return None
    if isinstance(reply, str | bytes):
        reply = json.loads(reply)
    if isinstance(reply, BaseModel):
        reply = reply.model_dump(mode="json")
    if not isinstance(reply, dict):
        reply = {k: getattr(reply, k) for k in ("seq", "hash", "ts", "run_id") if hasattr(reply, k)}
    fields = {k: reply[k] for k in ("seq", "hash", "ts", "run_id") if k in reply}
    return Anchor.model_validate(fields)



@contextmanager
def gate_anchor_store(home: Home) -> Iterator[GateAnchorStore]:
    """The gate's anchor for ``home``: the served gate on ``<home>/gate-run/gate.sock`` when it
    answers, else a gate started for the duration (``gate.client.running_gate``). Raises GateError."""
    from gate.client import GateClient, running_gate

    sock = home.root / "gate-run" / "gate.sock"
    if sock.exists():
        client = GateClient(socket_path=sock)
        try:
            client.status()
        except GateError:
            client.close()
        else:
            try:
                yield GateAnchorStore(client)
            finally:
                client.close()
            return
    if not home.exists():
        raise HomeError(f"no segfactory home at {home.root}, so no gate holds its anchor; run `segfactory init`")
    with running_gate(home.root) as started:
        yield GateAnchorStore(started)
