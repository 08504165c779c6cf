"""Milestones: scored once per name, quota per sealed version, no other path to these tiers."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gate.core import Gate
from gate.milestones import MilestoneRequest, run_milestone
from segfactory.errors import GateError
from tests.gate import models

pytestmark = pytest.mark.bwrap


def _req(name: str, paths: list[Path], tiers: list[str] | None = None) -> MilestoneRequest:
    encoded = [base64.b64encode(p.read_bytes()).decode() for p in paths]
    return MilestoneRequest(name=name, run_id="run-1", models_b64=encoded, tiers=tiers or ["sealed"])


def test_report_has_intervals_and_a_name_is_used_once(gate: Gate, better_model: Path) -> None:
    report = run_milestone(gate, _req("m1", [better_model], ["sealed", "never-queried"]))
    f1 = report["tiers"]["sealed"]["models"][models_sha(better_model)]["object_f1"]
    assert f1["low"] <= f1["estimate"] <= f1["high"]
    assert set(report["tiers"]) == {"sealed", "never-queried"}
    with pytest.raises(GateError, match="already used"):
        run_milestone(gate, _req("m1", [better_model]))


@pytest.mark.slow
def test_quota_counts_models_per_sealed_version(gate: Gate, tmp_path: Path) -> None:
    quota = gate.rule().milestone_quota["sealed"]
    paths = [models.save(models.threshold_model(bias=-0.4 - i / 100), tmp_path / f"m{i}.onnx") for i in range(quota + 1)]
    run_milestone(gate, _req("first", paths[:quota]))
    with pytest.raises(GateError, match="quota"):
        run_milestone(gate, _req("second", paths[quota:]))
    run_milestone(gate, _req("third", paths[:1]))  # re-scoring an already counted model is free


@pytest.mark.slow
def test_query_path_never_reaches_milestone_tiers(gate: Gate, better_model: Path) -> None:
    gate.submit(better_model.read_bytes(), "t1")
    gate.submit(better_model.read_bytes(), "t1-rep", replicate_of="t1")
    assert {q.tier for q in gate.ledger.queries()} <= {"confirm-a", "confirm-b"}


def models_sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
