"""Large radiographs: scored in tiles within a bounded batch, and a 2048 x 2048 image that trains on
crops, is scored whole in tiles by the trainer, the host and the gate alike, within the memory the
scheduler estimated for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.vision._data import make_version
from vision.tiling import BATCH_PIXELS, OVERLAP_PX, TILE_PX, per_batch, predict_batched, starts, tile_boxes

REPO = Path(__file__).resolve().parents[2]


def test_tiles_cover_every_pixel_overlap_and_end_flush_with_the_edge() -> None:
    assert starts(100) == [0] and starts(TILE_PX) == [0]
    offsets = starts(2048)
    assert offsets[0] == 0 and offsets[-1] == 2048 - TILE_PX
    assert all(b - a <= TILE_PX - OVERLAP_PX for a, b in zip(offsets, offsets[1:], strict=False))
    cover = np.zeros((2048, 1300), np.int32)
    for y, x in tile_boxes(2048, 1300):
        cover[y : y + TILE_PX, x : x + TILE_PX] += 1
    assert cover.min() >= 1


def test_small_images_keep_their_batches_and_large_ones_are_bounded_by_pixels() -> None:
    assert per_batch(64, 64, 128) == 128 and per_batch(96, 96, 64) == 64  # what the demo and default used
    seen: list[tuple[int, ...]] = []

    def record(batch: np.ndarray) -> np.ndarray:
        seen.append(batch.shape)
        return batch

    images = np.random.default_rng(0).random((2, 1100, 700), dtype=np.float32)
    out = predict_batched(record, images, max_batch=64)
    assert np.array_equal(out, images)  # a model that returns its input: the tiles stitch back exactly
    assert all(n * h * w <= max(BATCH_PIXELS, h * w) and (h, w) == (TILE_PX, TILE_PX) for n, h, w in seen)
    assert sum(n for n, _, _ in seen) == 2 * len(tile_boxes(1100, 700))


@pytest.mark.slow
def test_a_2048_px_radiograph_trains_on_crops_and_is_scored_in_tiles_within_the_measured_memory(
    tmp_path: Path,
) -> None:
    from gate.scorer import score_model
    from runner.scheduler import Scheduler
    from segfactory.home import Home
    from synthetic.splits import read_split
    from vision.config import parse_config
    from vision.onnx_infer import predict

    data = make_version(tmp_path / "v", 3, 1, 2048, seed=5, radii=(3.0, 6.0, 12.0), max_voids=25)
    config = {
        "version": 1,
        "model": {"name": "unet-mobilenetv3", "decoder_width": 16},
        "epochs": 1,
        "batch_size": 2,
        "sampling": {"crop": 64, "defect_centred_p": 0.7},
        "seed": 0,
        "device": "cpu",
        "threads": 2,
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    home = Home(tmp_path / "home")
    home.root.mkdir()
    validated = parse_config(config).model_dump(mode="json")
    estimate = Scheduler.for_home(home).estimate(validated, 2048, data_bytes=4 * 2048 * 2048 * 5)

    out, log = tmp_path / "run", tmp_path / "train.json"
    with log.open(
        "wb"
    ) as stdout:  # the worker as a process of its own; wait4 reads its peak RSS, as the probe's
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "segfactory",
                "train",
                "--config",
                str(tmp_path / "config.yaml"),
                "--data",
                str(data),
                "--out",
                str(out),
                "--json",
            ],
            cwd=REPO,
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(log.read_text())
    assert result["usable"] and result["parity"]["ok"] and "object_f1" in result["dev"]
    peak = int(usage.ru_maxrss) * 1024
    assert peak <= estimate, (
        f"the worker peaked at {peak / 2**20:.0f} MiB, over the estimate {estimate / 2**20:.0f} MiB"
    )

    dev = np.asarray(read_split(data / "dev").images)
    gate_prob = score_model(out / "model.onnx", dev)[:, 0]
    host_prob = predict(out / "model.onnx", dev)
    assert gate_prob.shape == (1, 2048, 2048)
    assert float(np.abs(gate_prob - host_prob).max()) < 1e-5  # the same tiles, the same numbers
