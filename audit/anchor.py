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
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from gate.client import GateClient, running_gate
from segfactory.errors import DataError, GateError, HomeError
from segfactory.files import write_atomic
from segfactory.home import Home
from segfactory.records import Anchor


@runtime_checkable
class AnchorStore(Protocol):
    """Keeps every anchored chain head, in order.

    ``put`` records (seq, hash) durably before it returns, or raises (a GateError, DataError or
    OSError) without recording anything; an anchor behind the latest one (a lower seq, or the same
    seq with another hash) is refused, since a log only grows. ``get`` returns the latest anchor,
    or None when nothing was ever anchored; ``history`` every anchor, oldest first. ``audit
    verify`` checks each of them against the log: a log cut and then re-grown past its old head
    agrees with a new latest anchor, but not with the old ones.
    """

    def put(self, seq: int, hash: str, run_id: str | None) -> None: ...

    def get(self) -> Anchor | None: ...

    def history(self) -> list[Anchor]: ...


def check_not_behind(latest: Anchor | None, seq: int, hash: str) -> None:
    """Raise DataError when (seq, hash) is behind ``latest`` (what the gate's ledger also refuses)."""
    if latest is not None and (seq < latest.seq or (seq == latest.seq and hash != latest.hash)):
        raise DataError(
            f"anchor refused: seq {seq} is behind the latest anchor seq {latest.seq}; "
            "the audit log was cut or rewritten. Keep it for review."
        )


class MemoryAnchorStore:
    """Tests only: an anchor held in the writer's own memory (not a real anchor)."""

    def __init__(self) -> None:
        self._latest: Anchor | None = None
        self._history: list[Anchor] = []
        self._lock = threading.Lock()

    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        anchor = Anchor(seq=seq, hash=hash, ts=time.time(), run_id=run_id)
        with self._lock:
            check_not_behind(self._latest, seq, hash)
            self._latest = anchor
            self._history.append(anchor)

    def get(self) -> Anchor | None:
        return self._latest

    def history(self) -> list[Anchor]:
        with self._lock:
            return list(self._history)


class FileAnchorStore:
    """Tests and local tooling only: the anchor as a JSON file (same trust domain: not a real anchor).

    Writes are atomic (temp file, fsync, rename), so a reader sees the old or the new anchor. The
    history is appended, one anchor per line, to ``<path>.history.jsonl`` before the file moves.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.history_path = self.path.with_name(self.path.name + ".history.jsonl")

    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        anchor = Anchor(seq=seq, hash=hash, ts=time.time(), run_id=run_id)
        check_not_behind(self.get(), seq, hash)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.history_path, "a") as log:
            log.write(anchor.model_dump_json() + "\n")
            log.flush()
            os.fsync(log.fileno())
        write_atomic(self.path, anchor.model_dump_json())

    def get(self) -> Anchor | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            return Anchor.model_validate_json(text)
        except ValueError as exc:
            raise DataError(
                f"anchor file {self.path} is not an anchor: {exc}; restore it or remove it"
            ) from exc

    def history(self) -> list[Anchor]:
        try:
            lines = self.history_path.read_text().splitlines()
        except FileNotFoundError:
            latest = self.get()
            return [] if latest is None else [latest]
        try:
            return [Anchor.model_validate_json(line) for line in lines if line.strip()]
        except ValueError as exc:
            raise DataError(f"anchor history {self.history_path} is not a list of anchors: {exc}") from exc


class GateAnchorClient(Protocol):
    """The part of ``gate.client.GateClient`` the anchor store uses (``PUT``/``GET /anchor``, its history)."""

    def put_anchor(self, seq: int, hash: str, run_id: str | None) -> Any: ...

    def get_anchor(self) -> Any: ...

    def get_anchor_history(self) -> Any: ...


C = TypeVar("C", bound=GateAnchorClient)


class GateAnchorStore(Generic[C]):
    """The real anchor: the chain head stored in the gate's ledger (append-only history there).

    Errors from the client (gate down, refused) propagate unchanged; the writer decides what a
    failed anchoring means (see ``audit.AuditLog``). ``client`` is the gate client it was given,
    for the caller's other calls.
    """

    def __init__(self, client: C) -> None:
        self.client: C = client

    def put(self, seq: int, hash: str, run_id: str | None) -> None:
        self.client.put_anchor(seq, hash, run_id)

    def get(self) -> Anchor | None:
        return anchor_from_reply(self.client.get_anchor())

    def history(self) -> list[Anchor]:
        reply = self.client.get_anchor_history()
        return [a for a in (anchor_from_reply(item) for item in reply) if a is not None]


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
def gate_anchor_store(home: Home) -> Iterator[GateAnchorStore[GateClient]]:
    """The gate's anchor for ``home``: the served gate on ``<home>/gate-run/gate.sock`` when it
    answers, else a gate started for the duration (``gate.client.running_gate``). Raises GateError."""

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
        raise HomeError(
            f"no segfactory home at {home.root}, so no gate holds its anchor; run `segfactory init`"
        )
    with running_gate(home.root) as started:
        yield GateAnchorStore(started)
