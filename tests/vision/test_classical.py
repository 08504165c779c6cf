"""baseline-classical: tuned on dev, exported to ONNX under the same contract as any model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.vision._data import make_version
from vision.classical import ClassicalDetector, ClassicalParams, opening
from vision.config import parse_config
from vision.evaluate import evaluate
from vision.train import train


def test_opening_removes_components_narrower_than_the_window() -> None:
    s = -torch.ones(1, 1, 12, 12)
    s[0, 0, 2, 2] = 1.0  # 1 px
    s[0, 0, 6:9, 6:9] = 1.0  # 3x3
    kept = opening(s, 2) >= 0
    assert not kept[0, 0, 2, 2] and kept[0, 0, 6:9, 6:9].all() and int(kept.sum()) == 9
    assert torch.equal(opening(s, 1), s)


def test_detector_polarity_finds_bright_voids() -> None:
    x = torch.full((1, 1, 16, 16), 0.4)
    x[0, 0, 8, 8] = 0.7
    logits = ClassicalDetector(ClassicalParams(bg_kernel=7, polarity=1.0, threshold=0.1, open_size=1))(x)
    assert logits[0, 0, 8, 8] > 0 and (logits > 0).sum() == 1


@pytest.mark.slow
def test_fit_tunes_on_dev_and_exports(tmp_path: Path) -> None:
    data = make_version(tmp_path / "v", n_train=8, n_dev=24, size=32, radii=(1.5, 3.0))
    result = train(
        parse_config({"epochs": 1, "batch_size": 8, "model": {"name": "baseline-classical"}}),
        data,
        tmp_path / "c",
    )
    assert result.usable and result.reload_ok and result.parity["ok"]
    assert result.dev["object_f1"] > 0.8  # bright discs on a flat background are easy
    params = json.loads((tmp_path / "c" / "classical.json").read_text())
    assert params["polarity"] == 1.0
    model = onnx.load(str(tmp_path / "c" / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == [
        "prob"
    ]
    report = evaluate(tmp_path / "c", data, n_boot=50)  # the same model scored through onnxruntime
    assert abs(report.metrics["object_f1"] - result.dev["object_f1"]) < 1e-9
    assert np.isfinite(report.intervals["object_f1"].low)
