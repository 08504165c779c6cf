"""Training on tiny data: files, reload and ONNX parity, determinism, resume, NaN stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from safetensors.torch import load_file

import vision.train as train_mod
from segfactory.errors import DataError
from tests.vision._data import make_version
from vision.checkpoint import read_checkpoint
from vision.config import TrainConfig, parse_config
from vision.onnx_infer import predict
from vision.train import train

TINY = {
    "epochs": 2,
    "batch_size": 8,
    "threads": 1,
    "model": {"name": "unet-mobilenetv3", "decoder_width": 8},
    "augment": {
        "noise_std": {"low": 0, "high": 0.02},
        "blur_sigma": {"low": 0, "high": 0.8},
        "gain": {"low": 0.9, "high": 1.1},
        "shift_px": {"low": 0, "high": 2},
        "gradient": {"low": 0, "high": 0.05},
    },
    "sampling": {"rare_oversample": 2.0},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_version(tmp_path_factory.mktemp("data") / "v1", n_train=24, n_dev=8, size=16)


def cfg(**over: Any) -> TrainConfig:
    return parse_config({**TINY, **over})


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("run") / "out"
    train(cfg(), data, out)
    return out


def test_run_writes_a_usable_model(run: Path, data: Path) -> None:
    result = json.loads((run / "result.json").read_text())
    assert result["usable"] and result["reload_ok"] and result["parity"]["ok"]
    assert result["epochs_completed"] == 2 and result["stopped_reason"] is None
    curve = [json.loads(line) for line in (run / "learning_curve.jsonl").read_text().splitlines()]
    assert [c["epoch"] for c in curve] == [0, 1] and "object_f1" in curve[0]["dev"]
    _, config, epoch = read_checkpoint(run / "model.safetensors")
    assert config == cfg() and epoch == 1  # the checkpoint carries its config


def test_onnx_follows_the_contract(run: Path) -> None:
    model = onnx.load(str(run / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == [
        "prob"
    ]
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert {n.domain for n in model.graph.node} <= {""}  # standard ops only
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    for n in (1, 5):  # dynamic batch; other image sizes too
        prob = predict(run / "model.onnx", np.random.default_rng(n).random((n, 24, 20), dtype=np.float32))
        assert prob.shape == (n, 24, 20) and prob.dtype == np.float32 and 0 <= prob.min() <= prob.max() <= 1


@pytest.mark.slow
def test_same_seed_same_weights(run: Path, data: Path, tmp_path: Path) -> None:
    train(cfg(), data, tmp_path / "again")
    a, b = load_file(str(run / "model.safetensors")), load_file(str(tmp_path / "again" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_resume_replays_the_same_run(
    run: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = train_mod.Trainer.end_epoch

    def crash_after_first(self: train_mod.Trainer, epoch: int, loss: float) -> dict[str, float]:
        original(self, epoch, loss)
        raise KeyboardInterrupt  # the process dies after epoch 0 was saved

    monkeypatch.setattr(train_mod.Trainer, "end_epoch", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        train(cfg(), data, tmp_path / "r")
    monkeypatch.setattr(train_mod.Trainer, "end_epoch", original)
    with pytest.raises(DataError, match="not empty"):
        train(cfg(), data, tmp_path / "r")
    result = train(cfg(), data, tmp_path / "r", resume=True)
    assert result.usable and result.epochs_completed == 2
    a, b = load_file(str(run / "model.safetensors")), load_file(str(tmp_path / "r" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = train_mod.combined_loss
    calls = {"n": 0}

    def poisoned(terms: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = real(terms, logits, target)
        return loss * float("nan") if calls["n"] > 3 else loss  # 3 steps per epoch: epoch 1 goes bad

    monkeypatch.setattr(train_mod, "combined_loss", poisoned)
    result = train(cfg(), data, tmp_path / "nan")
    assert not result.usable and result.epochs_completed == 1
    assert result.stopped_reason is not None and "non-finite loss in epoch 1" in result.stopped_reason
    assert read_checkpoint(tmp_path / "nan" / "model.safetensors")[2] == 0
    assert json.loads((tmp_path / "nan" / "result.json").read_text())["usable"] is False


def test_empty_and_mismatched_data_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a dataset version"):
        train(cfg(), tmp_path, tmp_path / "o")
    bad = make_version(tmp_path / "bad", 8, 8, 16)
    np.save(bad / "train" / "masks.npy", np.zeros((7, 16, 16), np.uint8))
    with pytest.raises(DataError, match="masks must be uint8 with the images' shape"):
        train(cfg(), bad, tmp_path / "o2")


@pytest.mark.slow
def test_other_options_train_usable(data: Path, tmp_path: Path) -> None:
    config = cfg(
        grad_accum=2,
        optim={"name": "sgd", "lr": 0.01},
        schedule={"name": "onecycle"},
        loss=[{"name": "focal"}, {"name": "tversky", "weight": 0.5}],
        sampling={"crop": 12, "defect_centred_p": 0.5},
        model={"name": "unet-resnet10t", "decoder_width": 8},
    )
    result = train(config, data, tmp_path / "o")
    assert result.usable and result.epochs_completed == 2
