"""The nnunet engine: a tiny real nnU-Net training, and its ONNX export against nnU-Net's own predictor.

The round trip trains ``nnunetv2`` itself (planning, preprocessing, ``nnUNetTrainer``) for nine
iterations on 24 disc images of 32 px, through the sandbox worker's entry point in its own
process, then checks here, independently of the worker's own check, that the exported graph
gives nnU-Net's probabilities:

- against nnU-Net's preprocessor + network in float32: max |diff| <= 1e-4 (``PARITY_ATOL``);
- against nnU-Net's predictor end to end (which sums tile logits in float16): <= 2e-2
  (``PREDICTOR_ATOL``), with no pixel decided differently at 0.5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from synthetic.splits import read_split
from tests.vision._data import make_version
from vision.config import parse_config
from vision.nnunet import _export, _train

REPO = Path(__file__).resolve().parents[2]


class _TwoClass:
    """A stand-in network body: background logit 0, void logit = its (normalised) input."""

    def __new__(cls) -> object:
        import torch

        class Body(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.cat([torch.zeros_like(x), x], dim=1)

        return Body()


def test_folded_graph_applies_nnunets_zscore_then_softmax() -> None:
    import torch
    from nnunetv2.preprocessing.normalization.default_normalization_schemes import ZScoreNormalization

    rng = np.random.default_rng(0)
    image = rng.uniform(0.2, 0.9, (1, 1, 24, 24)).astype(np.float32)
    shifted = image[0] + np.float32(1.0)  # what the raw export writes
    expected = ZScoreNormalization(use_mask_for_norm=False, intensityproperties={}).run(shifted)
    folded = _export.FoldedNnunet(_TwoClass())  # type: ignore[arg-type]
    with torch.no_grad():
        got = folded(torch.from_numpy(image)).numpy()
    np.testing.assert_allclose(got[0], 1 / (1 + np.exp(-expected)), atol=1e-5)


def test_nnunet_config_is_validated() -> None:
    from segfactory.errors import UsageError

    with pytest.raises(UsageError, match="nnunet.iterations_per_epoch"):
        parse_config(
            {"engine": "nnunet", "epochs": 2, "batch_size": 2, "nnunet": {"iterations_per_epoch": 0}}
        )
    with pytest.raises(UsageError, match="engine"):
        parse_config({"engine": "monai", "epochs": 2, "batch_size": 2})


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nnunet")
    data = make_version(root / "data", 24, 8, 32, seed=1)
    config = {
        "engine": "nnunet",
        "epochs": 3,
        "batch_size": 2,
        "device": "cpu",
        "threads": 2,
        "seed": 3,
        "nnunet": {
            "time_budget_s": 120,
            "iterations_per_epoch": 3,
            "val_iterations": 1,
            "export_reserve_s": 10,
            "data_workers": 0,
            "max_val_cases": 4,
            "parity_images": 4,
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vision.worker",
            "--config",
            str(root / "config.yaml"),
            "--data",
            str(data),
            "--out",
            str(root / "out"),
        ],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_worker_records_the_plan(trained: Path) -> None:
    result = json.loads((trained / "out" / "result.json").read_text())
    plan = json.loads((trained / "out" / "nnunet_plan.json").read_text())
    assert result["usable"] and result["model"] == "nnunet-2d"
    assert plan["patch_size"] == [32, 32] and plan["normalization"] == ["ZScoreNormalization"]
    assert plan["network"].endswith("PlainConvUNet") and plan["n_stages"] >= 3
    assert plan["epochs"] == 3 and plan["iterations"] == 9 and plan["postprocessing"].startswith("none")
    assert result["parity"]["max_abs_diff"] <= _export.PARITY_ATOL


@pytest.mark.slow
def test_onnx_equals_nnunets_predictor(trained: Path) -> None:
    dev = read_split(trained / "data" / "dev")
    images = np.asarray(
        dev.images, dtype=np.float32
    )  # all 8 dev images, 4 of them unseen by the worker's check
    folder = _train.model_folder({"nnUNet_results": trained / "out" / "nnunet" / "results"})
    predictor, network = _export.nnunet_probs(folder, images)
    from vision.onnx_infer import predict

    got = predict(trained / "out" / "model.onnx", images)
    assert got.shape == images.shape
    assert float(np.abs(network - got).max()) <= _export.PARITY_ATOL
    assert float(np.abs(predictor - got).max()) <= _export.PREDICTOR_ATOL
    assert np.array_equal(predictor >= 0.5, got >= 0.5)


@pytest.mark.slow
def test_export_passes_the_gates_intake(trained: Path) -> None:
    from gate.intake import inspect_model

    checked = inspect_model(trained / "out" / "model.onnx")
    assert len(checked.sha256) == 64
