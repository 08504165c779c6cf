"""Planted causes: the analysis must name what was planted, and find nothing in null runs.

The learner is the numpy ``HistogramTrainer`` (analysis.toy), behind the same Trainer/Predictor
protocols the vision models use (tests/analysis/test_planted_vision.py runs those); it exercises
the harness in seconds. Each reference model is trained once per seed within the test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.planted import (
    MixRun,
    OnnxPredictor,
    PlantedResult,
    draw_cause,
    plant,
    rate_lines,
    rates,
    run_mix,
)
from analysis.toy import HistogramTrainer, toy_split

# a fixed mix of every cause, two of size, two null runs trained with the reference's seed, and two
# trained with another seed (training noise only); magnitudes drawn from seeds 100 + k
MIX = [
    MixRun("size", 1, 1, 100),
    MixRun("contrast", 1, 1, 101),
    MixRun("masks", 1, 1, 102),
    MixRun("capacity", 1, 1, 103),
    MixRun("background", 1, 1, 104),
    MixRun("size", 2, 2, 105),
    MixRun("none", 1, 1, 106),
    MixRun("none", 2, 2, 107),
    MixRun("none", 1, 11, 108),
    MixRun("none", 2, 12, 109),
]
NOISE_SEED = 100  # the seed-noise band: the unplanted model with seed + NOISE_SEED


def test_each_cause_changes_the_training_data_as_it_says() -> None:
    train = toy_split(120, 32, seed=3)
    rng = np.random.default_rng(0)
    size = plant(draw_cause(rng, "size"), train, rng)
    assert size.images.shape[0] < 120 and size.cause.detail["images_removed"] == 120 - size.images.shape[0]
    masks = plant(draw_cause(rng, "masks"), train, rng)
    assert masks.masks.sum() < train.masks.sum() and masks.images.shape == train.images.shape
    cap = plant(draw_cause(rng, "capacity"), train, rng)
    assert 0 < cap.capacity < 1 and cap.images is train.images
    bg = plant(draw_cause(rng, "background"), train, rng)
    gone = bg.cause.detail["background_removed"]
    assert bg.images.shape[0] == sum(m["background"] != gone for m in train.image_meta)
    none = plant(draw_cause(rng, "none"), train, rng)
    assert none.images is train.images and none.capacity == 1.0
    kinds = {draw_cause(np.random.default_rng(s)).kind for s in range(40)}
    assert kinds == {"none", "size", "contrast", "masks", "capacity", "background"}


def test_an_onnx_model_is_a_predictor(tmp_path: Path) -> None:
    from analysis.toy import contrast_onnx

    images = toy_split(4, 32, seed=5).images
    prob = OnnxPredictor(contrast_onnx(tmp_path / "m.onnx", 0.0)).predict(images)
    assert prob.shape == images.shape and np.allclose(prob, 1 / (1 + np.exp(2.0)))


@pytest.mark.slow
def test_planted_causes_are_recovered_and_null_runs_stay_silent() -> None:
    train, dev = toy_split(400, 40, seed=1), toy_split(400, 40, seed=2)
    runs = run_mix(MIX, HistogramTrainer(), train, dev, noise_offset=NOISE_SEED)
    results: list[PlantedResult] = [r for r, _ in runs]
    for result, report in runs:
        if result.cause.kind == "none":
            assert result.n_findings == 0 and report.recommendations[0].action == "leave_it", (
                report.recommendations
            )
    summary = rates(results)
    planted = [r for r in results if r.cause.kind != "none"]
    assert sum(r.recovered for r in planted) >= 2 / 3 * len(planted), rate_lines(results)
    assert summary["false_finding"].estimate == 0.0
    assert summary["recovery"].low <= summary["recovery"].estimate <= summary["recovery"].high
