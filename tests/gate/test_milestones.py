"""Milestones: scored once per name, quota per sealed version, no other path to these tiers."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from gate.core import Gate
from gate.milestones import MilestoneRequest, run_milestone
from gate.replies import TierState
from gate.setup import add_real
from segfactory.errors import DataError, GateError
from synthetic.splits import image_sha256, write_split
from tests.gate import models
from tests.gate.conftest import make_split

pytestmark = pytest.mark.bwrap


def _req(name: str, paths: list[Path], tiers: list[str] | None = None) -> MilestoneRequest:
    encoded = [base64.b64encode(p.read_bytes()).decode() for p in paths]
    return MilestoneRequest(name=name, run_id="run-1", models_b64=encoded, tiers=tiers or ["sealed"])


def test_report_has_intervals_and_a_name_is_used_once(gate: Gate, better_model: Path) -> None:
    report = run_milestone(gate, _req("m1", [better_model], ["sealed", "never-queried"])).as_json()
    entry = report["tiers"]["sealed"]["models"][models_sha(better_model)]
    f1 = entry["object_f1"]
    assert f1["low"] <= f1["estimate"] <= f1["high"]
    assert set(report["tiers"]) == {"sealed", "never-queried"}
    # the win rule's "robust": recall per supported size bin, and the worst of them
    assert entry["slice_recall"] and entry["worst_slice_recall"] == min(entry["slice_recall"].values())
    assert set(entry["slice_recall"]) <= {"tiny_lt4", "small_4_15", "medium_16_63", "large_ge64"}
    # each slice's void count, so that a person can put a binomial interval on its recall
    assert set(entry["slice_voids"]) == set(entry["slice_recall"])
    for name, recall in entry["slice_recall"].items():
        voids = entry["slice_voids"][name]
        assert voids >= 1 and abs(recall * voids - round(recall * voids)) < 1e-9
    assert sum(entry["slice_voids"].values()) <= entry["n_voids"]
    with pytest.raises(GateError, match="already used"):
        run_milestone(gate, _req("m1", [better_model]))


@pytest.mark.slow
def test_quota_counts_models_per_sealed_version(gate: Gate, tmp_path: Path) -> None:
    quota = gate.rule().milestone_quota["sealed"]
    paths = [
        models.save(models.threshold_model(bias=-0.4 - i / 100), tmp_path / f"m{i}.onnx")
        for i in range(quota + 1)
    ]
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


@pytest.mark.slow
def test_real_holdout_is_added_as_versions_and_scored_only_by_milestones(
    gate: Gate, better_model: Path, tmp_path: Path
) -> None:
    """The real/held-out tier: `gate add-real` versions it in the vault; milestones score it."""
    images, masks = make_split(7, 40)
    meta = [{"id": f"real-{i}", "sha256": image_sha256(img)} for i, img in enumerate(images)]
    write_split(tmp_path / "real", images, masks, meta, [], {"source": "import"})
    assert add_real(gate, tmp_path / "real") == 1 and add_real(gate, tmp_path / "real") == 2
    assert TierState(tier="real-holdout", version=2, budget=0, spent=0, left=0) in gate.ledger.tier_versions()
    report = run_milestone(gate, _req("real-1", [better_model], ["real-holdout"])).as_json()
    scored = report["tiers"]["real-holdout"]
    assert scored["version"] == 2 and scored["models"][models_sha(better_model)]["n_images"] == 40
    assert gate.ledger.milestone_models("real-holdout", 2) == {models_sha(better_model)}
    gate.submit(better_model.read_bytes(), "q1")  # the query path: confirm-a only
    assert {q.tier for q in gate.ledger.queries()} == {"confirm-a"}
    write_split(tmp_path / "unlabelled", images, np.zeros_like(masks), meta, [], {"source": "import"})
    with pytest.raises(DataError, match="no labelled voids"):
        add_real(gate, tmp_path / "unlabelled")
