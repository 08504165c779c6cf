"""Starting a run from a parent's weights: strict load, fresh schedule, clear refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from segfactory.errors import DataError
from tests.vision._data import make_version
from vision.checkpoint import MODEL_FILE
from vision.config import TrainConfig, parse_config
from vision.train import train
from vision.worker import main as worker_main

TINY: dict[str, object] = {  # a training config before validation (parse_config)
    "epochs": 1,
    "batch_size": 8,
    "threads": 1,
    "model": {"name": "unet-plain", "decoder_width": 8, "stages": 3},
    "schedule": {"name": "cosine", "warmup_epochs": 1},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_version(tmp_path_factory.mktemp("data") / "v1", n_train=16, n_dev=8, size=16)


def cfg(**over: Any) -> TrainConfig:
    return parse_config({**TINY, **over})


@pytest.fixture(scope="module")
def parent(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("parent") / "out"
    train(cfg(), data, out)
    return out / MODEL_FILE


def test_a_child_starts_from_the_parents_weights_with_a_fresh_schedule(
    data: Path, parent: Path, tmp_path: Path
) -> None:
    zero_lr = {"optim": {"lr": 1e-9}, "schedule": {"name": "constant"}}
    out = tmp_path / "child"
    result = train(cfg(**zero_lr, seed=7), data, out, init_from=parent)
    assert result.usable
    before, after = load_file(str(parent)), load_file(str(out / MODEL_FILE))
    drift = max(
        float((before[k].float() - after[k].float()).abs().max()) for k in before if "running" not in k
    )
    assert (
        drift < 1e-4
    )  # at a vanishing learning rate the child keeps its parent's weights (a seed-7 init would not)
    fresh = train(cfg(**zero_lr, seed=7), data, tmp_path / "fresh")
    assert fresh.usable
    other = load_file(str(tmp_path / "fresh" / MODEL_FILE))
    assert max(float((before[k].float() - other[k].float()).abs().max()) for k in before) > 1e-2
    curve = [json.loads(line) for line in (out / "learning_curve.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in curve] == [0]  # its own epochs from 0: the schedule starts afresh
    assert "init_s" in result.timings


def test_a_checkpoint_of_another_architecture_is_refused_before_training(
    data: Path, parent: Path, tmp_path: Path
) -> None:
    wider = cfg(model={"name": "unet-plain", "decoder_width": 16, "stages": 3})
    with pytest.raises(DataError, match="does not fit this ticket's model.*shape"):
        train(wider, data, tmp_path / "out", init_from=parent)
    assert not (tmp_path / "out" / "learning_curve.jsonl").exists()  # no epoch ran
    deeper = cfg(model={"name": "unet-plain", "decoder_width": 8, "stages": 4})
    with pytest.raises(DataError, match="missing"):
        train(deeper, data, tmp_path / "out2", init_from=parent)


def test_a_tensor_file_that_is_not_a_segfactory_checkpoint_is_refused(
    data: Path, parent: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.safetensors"
    save_file(load_file(str(parent)), str(plain))  # the right tensors, without the format marker
    with pytest.raises(DataError, match="not a segfactory checkpoint"):
        train(cfg(), data, tmp_path / "out", init_from=plain)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x80\x04not safetensors")
    with pytest.raises(DataError, match="cannot be read as safetensors"):
        train(cfg(), data, tmp_path / "out3", init_from=junk)


def test_the_worker_refuses_a_mismatch_with_one_clear_line(
    data: Path, parent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({**TINY, "model": {"name": "unet-plain", "decoder_width": 16, "stages": 3}}))
    argv = ["--config", str(config), "--data", str(data), "--out", str(tmp_path / "out")]
    code = worker_main([*argv, "--init-from", str(parent)])
    assert code == DataError.exit_code
    assert "does not fit this ticket's model" in capsys.readouterr().err


def test_init_from_is_refused_for_engines_without_weights(data: Path, parent: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="factory's trainer"):
        train(cfg(model={"name": "baseline-classical"}), data, tmp_path / "out", init_from=parent)
