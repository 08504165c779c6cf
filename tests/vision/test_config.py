"""Training configs: validation errors name the field; the shipped configs parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from segfactory.errors import UsageError
from vision.config import MAX_BATCH_PIXELS, dump_config, load_config, parse_config
from vision.models import build_model, known_models

REPO = Path(__file__).resolve().parents[2]


def test_missing_field_is_named() -> None:
    with pytest.raises(UsageError, match="epochs: Field required"):
        parse_config({"batch_size": 8})


def test_wrong_type_is_named() -> None:
    with pytest.raises(UsageError, match="batch_size"):
        parse_config({"epochs": 1, "batch_size": "eight"})


def test_unknown_field_is_refused() -> None:
    with pytest.raises(UsageError, match="optimiser"):
        parse_config({"epochs": 1, "batch_size": 8, "optimiser": "adam"})


def test_inverted_range_is_refused() -> None:
    with pytest.raises(UsageError, match="augment.noise_std"):
        parse_config({"epochs": 1, "batch_size": 8, "augment": {"noise_std": {"low": 0.1, "high": 0.0}}})


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(UsageError, match="mapping"):
        load_config(path)


def test_unknown_model_lists_known() -> None:
    with pytest.raises(UsageError, match="'unet-vgg' is not registered; known: baseline-classical"):
        build_model("unet-vgg")
    assert {"unet-resnet10t", "unet-mobilenetv3", "unet-efficientnet_b0"} <= set(known_models())


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_parse_and_round_trip(path: Path) -> None:
    cfg = load_config(path)
    assert parse_config(__import__("yaml").safe_load(dump_config(cfg))) == cfg


def test_unknown_model_in_config_is_refused_at_validation() -> None:
    with pytest.raises(UsageError, match="model.name: .*'unet-vgg' is not registered"):
        parse_config({"epochs": 1, "batch_size": 8, "model": {"name": "unet-vgg"}})


# What a proposer's patch could ask for that would exhaust the host before any sandbox starts: each is
# refused at validation, naming the field.
@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ({"sampling": {"crop": 100_000}}, "sampling.crop"),
        ({"batch_size": 4096, "sampling": {"crop": 1024}}, "MAX_BATCH_PIXELS"),
        ({"augment": {"blur_sigma": {"low": 0, "high": 1e9}}}, "augment.blur_sigma.high"),
        ({"augment": {"scale": {"low": 1, "high": float("inf")}}}, "augment.scale.high"),
        ({"loss": [{"name": "focal", "focal_gamma": 1e6}]}, "focal_gamma"),
        ({"threads": 10**6}, "threads"),
        ({"schedule": {"warmup_epochs": 10**9}}, "schedule.warmup_epochs"),
    ],
)
def test_unbounded_values_a_proposer_could_write_are_refused(patch: dict[str, object], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        parse_config({"epochs": 1, "batch_size": 8, **patch})


def test_the_largest_shipped_batch_is_far_inside_the_pixel_bound() -> None:
    config = load_config(REPO / "configs" / "run-default.yaml")
    assert config.sampling.crop is not None
    assert config.batch_size * config.sampling.crop**2 * 10 < MAX_BATCH_PIXELS
