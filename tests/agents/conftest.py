"""Fixtures for the agents tests: a real audit log in a temporary home, keys, sample context."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from agents.context import DevAnalysis, VerdictEntry, build_context
from agents.context import ProposerContext as Context
from audit import AuditLog, MemoryAnchorStore, iter_records
from gate.replies import GateStatus
from segfactory.home import Home
from segfactory.records import AuditRecord, Direction, ExpectedEffect, Recommendation, TicketKind


def gate_status(best: str) -> GateStatus:
    """What a fake gate's ``status()`` answers: a pinned, healthy gate whose current best is ``best``."""
    return GateStatus(
        win_rule_sha256="0" * 64,
        win_rule_ok=True,
        pinned_code_sha256=None,
        pinned_code_ok=None,
        tiers=[],
        quarantine=[],
        current_best=best,
    )


class Log:
    """The real audit log plus read-back helpers for assertions."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.log = AuditLog(home, MemoryAnchorStore())

    def append(self, actor: Any, event: str, payload: Mapping[str, object], run_id: str | None = None) -> Any:
        return self.log.append(actor, event, payload, run_id=run_id)

    def put_blob(self, data: bytes) -> str:
        return self.log.put_blob(data)

    def records(self) -> list[AuditRecord]:
        return list(iter_records(self.log.path))

    def events(self, name: str) -> list[dict[str, JsonValue]]:
        return [r.payload for r in self.records() if r.event == name]

    def blob(self, ref: str) -> bytes:
        return self.log.blobs.get(ref)


@pytest.fixture
def audit_log(tmp_path: Path) -> Iterator[Log]:
    home = Home(tmp_path / "home")
    home.root.mkdir()
    log = Log(home)
    yield log
    log.log.close()


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-secret")


def recommendation(rid: str, key: str, value: Any) -> Recommendation:
    return Recommendation(
        id=rid,
        evidence={"slice": "small voids", "count": 41, "dev_iou": 0.52},
        action=f"set {key}={value}",
        kind=TicketKind.CONFIG,
        change={key: value},
        predicted_effect=ExpectedEffect(metric="iou", slice="small voids", direction=Direction.UP, size=0.02),
        rationale="small voids are missed on dev",
    )


@pytest.fixture
def context() -> Context:
    analysis = DevAnalysis(
        summary="dev IoU 0.61; small voids missed",
        recommendations=(recommendation("r1", "lr", 0.0005), recommendation("r2", "epochs", 6)),
    )
    return build_context(analysis, [])


__all__ = ["Log", "VerdictEntry", "recommendation"]
