"""Real tiers against the training range: milestones and `gate add-real` mark a shifted set."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cli.gate_cmds import _fill_ranges, _milestone_md, _outside, _real_set_range
from gate.core import Gate
from gate.milestones import MilestoneRequest, run_milestone
from gate.setup import add_real
from synthetic.splits import image_sha256, read_split, write_split
from tests.gate import models
from tests.gate.conftest import make_split
from vision.training_data import write_training_record

pytestmark = pytest.mark.bwrap


def _write(folder: Path, images: np.ndarray, masks: np.ndarray) -> Path:
    meta = [{"id": f"img-{i}", "sha256": image_sha256(img)} for i, img in enumerate(images)]
    return write_split(folder, images, masks, meta, [], {"source": "test"})


def _ticket(gate: Gate, model: Path, train: Path) -> Path:
    """A ticket folder as the runner leaves it: model.onnx beside the host's training manifest."""
    folder = gate.home_root / "runs" / "r1" / "tickets" / "t1"
    folder.mkdir(parents=True)
    shutil.copy(model, folder / "model.onnx")
    manifest = {"train": {"path": str(train), "content_hash": read_split(train).content_hash}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder / "model.onnx"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_dark_real_tier_is_outside_and_its_collapse_is_a_shift(
    gate: Gate, better_model: Path, tmp_path: Path
) -> None:
    train = _write(tmp_path / "train", *make_split(1, 40))
    _ticket(gate, better_model, train)
    images, masks = make_split(7, 40)
    _write(tmp_path / "dark", images / np.float32(16), masks)  # a 12-bit set read as 16-bit
    add_real(gate, tmp_path / "dark")
    (tmp_path / "run2").mkdir()
    outsider = models.save(models.threshold_model(bias=-0.5), tmp_path / "run2" / "model.onnx")
    write_training_record(outsider.parent, train)  # a run folder outside the home, as `train` leaves it
    req = MilestoneRequest(
        name="real-dark",
        run_id="r1",
        tiers=["real-holdout"],
        models_b64=[base64.b64encode(p.read_bytes()).decode() for p in (better_model, outsider)],
    )
    typed = run_milestone(gate, req)
    report = typed.as_json()  # the reply's wire form
    block = report["tiers"]["real-holdout"]
    shift = block["models"][_sha(better_model)]["training_range"]
    assert block["intensity"]["n_images"] == 40 and shift["source"] == "training manifest"
    assert shift["outside"] is True and any(r.startswith("intensity:") for r in shift["reasons"])
    assert shift["zero_detections"] and shift["finding"] == "shift"
    assert "set" not in shift and "train" in shift  # the tier's own statistics are given once, above
    assert block["models"][_sha(outsider)]["training_range"]["known"] is False  # the gate cannot see it
    filled = _fill_ranges(typed, [outsider], gate.home_root)  # the CLI can: it was given the path
    outside_range = filled.tiers["real-holdout"].models[_sha(outsider)].training_range
    assert outside_range is not None and outside_range.source == "training_data.json"
    assert _outside(filled) == {"real-holdout": {_sha(better_model): True, _sha(outsider): True}}
    assert filled.as_json()["tiers"]["real-holdout"]["intensity"] == block["intensity"]
    assert _milestone_md(filled).count("**outside the training range**: intensity:") == 2


def test_add_real_compares_with_the_current_best_or_train_data(
    gate: Gate, better_model: Path, tmp_path: Path
) -> None:
    train = _write(tmp_path / "train", *make_split(1, 40))
    images, masks = make_split(7, 40)
    real = _write(tmp_path / "real", images, masks)
    dark = _write(tmp_path / "dark", images / np.float32(16), masks)
    unknown = _real_set_range(gate, real, None)  # the baseline: no record of any training data
    assert unknown.known is False and "--train-data" in (unknown.reason or "")
    assert set(unknown.as_json()) == {"known", "outside", "model", "reason"}  # gate add-real --json
    assert _real_set_range(gate, dark, str(train)).outside is True
    gate.set_best(_ticket(gate, better_model, train), "promotion", "test")
    assert _real_set_range(gate, real, None).outside is False
    found = _real_set_range(gate, dark, None)
    assert found.outside is True and (found.model or "").endswith("tickets/t1/model.onnx")
    assert {
        "known",
        "outside",
        "source",
        "train_split",
        "stats",
        "reasons",
        "bound",
        "set",
        "train",
        "model",
    } == set(found.as_json())
