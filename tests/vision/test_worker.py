"""The sandbox entry ``python -m vision.worker`` (run here without a sandbox)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.vision._data import make_version

REPO = Path(__file__).resolve().parents[2]


def worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vision.worker", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("epochs: one\nbatch_size: 8\n")
    res = worker("--config", str(tmp_path / "c.yaml"), "--data", str(tmp_path), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "epochs" in res.stderr and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_worker_trains_into_out(tmp_path: Path) -> None:
    data = make_version(tmp_path / "v", 16, 8, 16)
    cfg = {
        "epochs": 1,
        "batch_size": 8,
        "threads": 1,
        "model": {"name": "unet-mobilenetv3", "decoder_width": 8},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = worker("--config", str(tmp_path / "c.yaml"), "--data", str(data), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert {"model.onnx", "model.safetensors", "result.json", "learning_curve.jsonl"} <= {
        p.name for p in (tmp_path / "out").iterdir()
    }
