"""Two vaults that differ only in held-back labels give agents byte-identical answers but verdicts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gate.client import GateClient, running_gate
from tests.gate import models
from tests.gate.conftest import build_home

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _script(client: GateClient, work: Path) -> list[bytes]:
    """A fixed sequence of agent actions; returns the raw response bodies."""
    good = models.save(models.threshold_model(bias=-0.45), work / "good.onnx")
    rep = models.save(models.threshold_model(bias=-0.47), work / "rep.onnx")
    bad = work / "bad.onnx"
    bad.write_bytes(b"not a model")
    steps: list[dict[str, Any]] = [
        {"ticket_id": "a1", "model": good},
        {"ticket_id": "a1", "model": good},  # replay
        {"ticket_id": "a2", "model": bad},
        {"ticket_id": "a3", "model": rep, "replicate_of": "a1"},
        {"ticket_id": "a4", "model": good},  # cache
    ]
    bodies = []
    for step in steps:
        import base64

        body = {"ticket_id": step["ticket_id"], "model_b64": base64.b64encode(step["model"].read_bytes()).decode(),
                "replicate_of": step.get("replicate_of")}
        bodies.append(client._http.post("/submit", json=body).content)
    bodies.append(client._http.post("/submit", content=b"{oops").content)
    return bodies


def _normalise(body: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(body)
    data.pop("verdict")
    data["ticket_id"] = re.sub(r"^malformed-[0-9a-f]+$", "malformed-<id>", data["ticket_id"])
    return data


def test_agent_visible_outputs_do_not_depend_on_held_back_labels(tmp_path: Path) -> None:
    outputs = []
    for name, strong_labels in (("one", False), ("two", True)):
        home, _ = build_home(tmp_path / name / "home", strong_labels=strong_labels)
        work = tmp_path / name / "work"
        work.mkdir()
        with running_gate(home, ["--pad-quantum", "0.2"]) as client:
            outputs.append(_script(client, work))
    one, two = outputs
    assert [_normalise(b) for b in one] == [_normalise(b) for b in two]
    assert [json.loads(b)["verdict"] for b in one] != [json.loads(b)["verdict"] for b in two]  # labels matter
    assert len({len(b) for b in one + two}) <= 4  # bodies differ only by verdict word and ids
