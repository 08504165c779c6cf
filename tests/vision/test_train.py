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
from vision.result import TrainResult
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


class _Clock:
    """A perf_counter for vision.train that moves only when a test says (an epoch takes 2 s)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _timed_epochs(monkeypatch: pytest.MonkeyPatch, seconds: float) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(train_mod, "time", clock)
    epoch = train_mod.Trainer.train_epoch

    def timed(self: train_mod.Trainer, index: int, tick: Any) -> float:
        clock.now += seconds
        return epoch(self, index, tick)

    monkeypatch.setattr(train_mod.Trainer, "train_epoch", timed)
    return clock


def _result(data: Path, out: Path, **over: Any) -> TrainResult:
    """Train per ``TINY`` and ``over``; what the run's result.json says."""
    train(cfg(**over), data, out)
    return TrainResult.model_validate_json((out / "result.json").read_text())


def test_a_budget_sized_run_trains_what_its_budget_holds_and_its_schedule_follows(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _timed_epochs(monkeypatch, 2.0)
    result = _result(data, tmp_path / "sized", epochs=30, time_budget_s=30.0)
    # 2 s an epoch, 10 s kept for the final checks: (30 - 4 - 10) / 2 = 8 more after the second
    assert result.epochs_completed == 10 and result.usable
    assert result.plan == {
        "time_budget_s": 30.0,
        "sized_after_epoch": 2,
        "spent_s": 4.0,
        "epoch_s": 2.0,
        "epochs_planned": 10,
        "epochs_cap": 30,
    }
    curve = [
        json.loads(line) for line in (tmp_path / "sized" / "learning_curve.jsonl").read_text().splitlines()
    ]
    assert curve[-1]["lr"] < 0.01 * cfg().optim.lr  # the cosine ends with the planned length, not the cap's


def test_a_budget_sized_run_keeps_its_cap_and_at_least_what_it_trained(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _timed_epochs(monkeypatch, 2.0)
    roomy = _result(data, tmp_path / "roomy", epochs=3, time_budget_s=1000.0)
    assert roomy.epochs_completed == 3 and roomy.plan["epochs_planned"] == 3  # the cap
    tight = _result(data, tmp_path / "tight", epochs=30, time_budget_s=5.0)
    assert tight.epochs_completed == 1 and tight.usable  # over budget after one: stops there
    plain = train(cfg(epochs=3), data, tmp_path / "plain")
    assert plain.epochs_completed == 3 and plain.plan == {}  # no budget: exactly its epochs


def test_a_carving_run_never_trains_on_its_carve_and_keeps_the_carves_best_epoch(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = cfg(epochs=3, validation={"fraction": 0.25, "seed": 0})
    version = train_mod.load_version(data)
    keep, held = train_mod.carve(version, config)
    assert keep is not None and held is not None and len(held) > 0
    assert set(keep.tolist()).isdisjoint(held.tolist()) and len(keep) + len(held) == 24
    assert np.array_equal(held, train_mod.carve(version, config)[1])  # fixed by content, not by a ticket
    seen: list[int] = []
    real = train_mod.crop_batch

    def spy(images: np.ndarray, masks: np.ndarray, *rest: Any) -> Any:
        seen.extend(int(i) for i in np.flatnonzero(np.isin(version.train.images, images).all(axis=(1, 2))))
        return real(images, masks, *rest)

    # the carve scores worst on the last epoch: the epoch kept is the best earlier one, not the last
    scores = iter([0.2, 0.5, 0.1])
    monkeypatch.setattr(train_mod, "crop_batch", spy)
    monkeypatch.setattr(train_mod.Trainer, "carve_f1", lambda self, held: next(scores))
    out = tmp_path / "out"
    result = train(config, data, out)
    assert seen and not set(seen) & set(held.tolist())
    assert result.plan["selected_epoch"] == 1 and result.plan["carve_images"] == len(held)
    assert read_checkpoint(out / "model.safetensors")[2] == 1
    curve = [json.loads(line) for line in (out / "learning_curve.jsonl").read_text().splitlines()]
    assert [round(line["carve_object_f1"], 3) for line in curve] == [0.2, 0.5, 0.1]


def test_without_a_carve_the_last_epoch_is_kept_and_every_image_trains(run: Path) -> None:
    result = json.loads((run / "result.json").read_text())
    assert "selected_epoch" not in result["plan"]
    assert read_checkpoint(run / "model.safetensors")[2] == 1
