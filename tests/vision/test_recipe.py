"""nnU-Net's recipe in the factory's own trainer: plain U-Net sized from the data, deep supervision,
poly SGD."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runner._workspace import _deep_merge
from segfactory.errors import UsageError
from tests.vision._data import make_version
from vision.config import parse_config
from vision.plain_unet import PlainUNet, stages_for
from vision.recipes import NNUNET_RECIPE, recipe_patch
from vision.train import deep_supervision_weights, train

BASE = {"epochs": 2, "batch_size": 4, "device": "cpu", "threads": 2, "sampling": {"crop": 32}}


def test_depth_is_sized_like_nnunets() -> None:
    assert [stages_for(s) for s in (8, 32, 64, 128, 1024)] == [2, 4, 5, 6, 7]


def test_deep_supervision_returns_every_decoder_stage_in_training_only() -> None:
    net = PlainUNet(4, 8, deep_supervision=True).train()
    outs = net(torch.rand(2, 1, 32, 32))
    assert isinstance(outs, list) and [tuple(o.shape[-2:]) for o in outs] == [(32, 32), (16, 16), (8, 8)]
    net.eval()
    with torch.no_grad():
        assert net(torch.rand(1, 1, 37, 45)).shape == (1, 1, 37, 45)  # odd sides: eval is one map, full size


def test_deep_supervision_weights_are_nnunets() -> None:
    assert deep_supervision_weights(4) == pytest.approx([4 / 7, 2 / 7, 1 / 7, 0.0])
    assert deep_supervision_weights(1) == [1.0]


def test_the_recipe_is_a_valid_patch_and_bad_combinations_are_refused() -> None:
    config = parse_config(_deep_merge(BASE, recipe_patch(NNUNET_RECIPE)))
    assert config.model.name == "unet-plain" and config.optim.nesterov and config.schedule.name == "poly"
    assert config.sampling.defect_centred_p == pytest.approx(0.33) and config.deep_supervision
    with pytest.raises(UsageError, match="deep_supervision needs model.name unet-plain"):
        parse_config({**BASE, "deep_supervision": True})
    with pytest.raises(UsageError, match="nesterov needs"):
        parse_config({**BASE, "optim": {"name": "adamw", "nesterov": True}})
    with pytest.raises(UsageError, match="known: nnunet-recipe"):
        recipe_patch("nnunet")


def test_a_recipe_run_trains_exports_and_records_its_depth(tmp_path: Path) -> None:
    data = make_version(tmp_path / "data", 16, 8, 32, seed=2)
    config = parse_config(_deep_merge(BASE, recipe_patch(NNUNET_RECIPE)))
    result = train(config, data, tmp_path / "out")
    assert result.usable and result.parity["ok"], result
    saved = parse_config(__import__("yaml").safe_load((tmp_path / "out" / "config.yaml").read_text()))
    assert saved.model.stages == 4  # resolved from the 32 px crop, so the checkpoint rebuilds the same net
