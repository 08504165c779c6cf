"""``segfactory train`` and ``segfactory evaluate`` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from synthetic.splits import write_split
from tests.vision._data import make_version


def write_config(path: Path, **over: Any) -> Path:
    data = {
        "epochs": 1,
        "batch_size": 8,
        "threads": 1,
        "model": {"name": "unet-mobilenetv3", "decoder_width": 8},
        "augment": {"blur_sigma": {"low": 0, "high": 1.0}},
        **over,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_config_missing_field_is_one_clear_line(cli: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("batch_size: 8\n")
    res = cli("train", "--config", str(cfg), "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--json")
    assert res.returncode != 0 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        f"segfactory: error: {cfg}: invalid training config: epochs: Field required"
    ]


def test_unknown_model_is_refused(cli: Any, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", model={"name": "unet-vgg"})
    data = make_version(tmp_path / "v", 8, 4, 16)
    res = cli("train", "--config", str(cfg), "--data", str(data), "--out", str(tmp_path / "o"))
    assert res.returncode != 0 and "model 'unet-vgg' is not registered; known:" in res.stderr


def test_evaluate_empty_dataset_is_refused(cli: Any, tmp_path: Path) -> None:
    empty = write_split(
        tmp_path / "empty", np.zeros((0, 8, 8), np.float32), np.zeros((0, 8, 8), np.uint8), [], [], {}
    )
    model = tmp_path / "model.onnx"
    model.write_bytes(b"")
    res = cli("evaluate", "--model", str(model), "--data", str(empty), "--json")
    assert res.returncode != 0 and res.stdout == "" and "dataset is empty" in res.stderr


@pytest.mark.slow
def test_train_then_evaluate_json(cli: Any, tmp_path: Path) -> None:
    data = make_version(tmp_path / "v", 16, 8, 16)
    res = cli(
        "train",
        "--config",
        str(write_config(tmp_path / "c.yaml")),
        "--data",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["usable"] and out["reload_ok"] and out["parity"]["ok"] and out["epochs_completed"] == 1
    res = cli(
        "evaluate",
        "--model",
        str(tmp_path / "run"),
        "--data",
        str(data),
        "--robustness",
        "--n-boot",
        "50",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert {"metrics", "intervals", "worst_slice", "per_image", "robustness"} <= set(report)
    assert len(report["per_image"]["object_tp"]) == 8
    cells = report["robustness"]["cells"]
    assert len(cells) == 8 * 5 and report["robustness"]["training_config_found"]
    blur = {c["severity"]: c["within_training_range"] for c in cells if c["perturbation"] == "detector_blur"}
    assert blur == {1: True, 2: True, 3: False, 4: False, 5: False}  # trained with blur sigma up to 1.0
    assert all(c["finding"] != "vulnerability" or c["within_training_range"] for c in cells)
