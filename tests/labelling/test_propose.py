"""label propose: classical proposals segmented by the current best, through the confined scorer,
written as a review queue; the real CLI prints one JSON object."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.labelling import current_best_model, decode_mask, propose_labels
from segfactory.errors import HomeError
from segfactory.home import Home
from synthetic.splits import read_split
from synthetic.versions import DatasetVersion


def test_proposed_masks_match_the_voids_and_carry_a_confidence(home: Home, discs: Path) -> None:
    assert current_best_model(home).name == "model.onnx"
    queue, path = propose_labels(home, discs)
    split = read_split(discs)
    assert json.loads(path.read_text())["data_content_hash"] == split.content_hash
    assert queue.items and all(0.5 <= item.confidence <= 1 for item in queue.items)
    hits = 0
    for item in queue.items:
        mask = decode_mask(item, split.images.shape[1:])
        assert int(mask.sum()) == item.area
        hits += bool((mask & (split.masks[item.image_index] > 0)).any())
        assert item.image_sha256 == split.image_meta[item.image_index]["sha256"]
    assert hits / len(queue.items) >= 0.9  # almost every proposal is a real void
    n_voids = sum(1 for d in split.defects)
    assert len(queue.items) >= 0.8 * n_voids
    assert {item.source for item in queue.items} <= {"classical+model", "model"}


def test_no_current_best_is_a_clear_error(tmp_home: Path, discs: Path) -> None:
    tmp_home.mkdir(parents=True)
    with pytest.raises(HomeError, match="no classical detector"):
        propose_labels(Home(tmp_home), discs)


def test_cli_prints_one_json_object(
    home: Home, discs: Path, base: DatasetVersion, cli: Callable[..., Any]
) -> None:
    res = cli("label", "propose", "--data", str(discs), "--home", str(home.root), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["n_items"] > 0 and Path(summary["queue"]).is_file()
    assert summary["round"] == "labels/v1" and summary["base"] == base.ref == "discs/v1"
    assert np.isclose(
        summary["mean_confidence"],
        np.mean([i["confidence"] for i in json.loads(Path(summary["queue"]).read_text())["items"]]),
    )
