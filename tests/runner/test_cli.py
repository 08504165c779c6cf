"""``segfactory device profile``: real probe processes, the profile stored in the home."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.scheduler import load_profile
from segfactory.home import Home


def test_bad_batch_sizes_are_one_clear_error(cli: Callable[..., Any], tmp_home: Path) -> None:
    result = cli("device", "profile", "--home", str(tmp_home), "--batch-sizes", "4,x", "--json")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "segfactory: error: --batch-sizes must be comma-separated integers, e.g. 4,16; got '4,x'"
    ]
    assert not (tmp_home / "device_profile.json").exists()


@pytest.mark.slow
def test_profile_measures_each_batch_in_its_own_process(cli: Callable[..., Any], tmp_home: Path) -> None:
    result = cli(
        "device",
        "profile",
        "--home",
        str(tmp_home),
        "--presets",
        "unet-mobilenetv3",
        "--batch-sizes",
        "2,16",
        "--image-size",
        "32",
        "--device",
        "cpu",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["device"] == "cpu" and summary["image_size"] == 32
    assert [m["batch_size"] for m in summary["measurements"]] == [2, 16]
    assert all(m["peak_bytes"] > 100 * 2**20 for m in summary["measurements"])  # torch alone is more
    assert set(summary["fits"]["unet-mobilenetv3"]) == {"base_bytes", "bytes_per_image", "image_size"}
    stored = load_profile(Home(tmp_home))
    assert stored is not None and stored.model_dump(mode="json")["measurements"] == summary["measurements"]
