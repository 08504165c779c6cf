"""Planted causes: the analysis must name what was planted, and find nothing in null runs.

The learner is the numpy ``HistogramTrainer`` (analysis.toy), behind the same Trainer/Predictor
protocols a vision model would use; each reference model is trained once per seed and cached.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.planted import PlantedResult, draw_cause, plant, rates, run_planted
from analysis.report import Evaluated
from analysis.toy import HistogramTrainer, toy_split

# (cause, training seed): a fixed mix of every cause, two of size, and two null runs
MIX = [("size", 1), ("contrast", 1), ("masks", 1), ("capacity", 1), ("background", 1), ("size", 2),
       ("none", 1), ("none", 2)]


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


@pytest.mark.slow
def test_planted_causes_are_recovered_and_null_runs_stay_silent() -> None:
    train, dev = toy_split(400, 40, seed=1), toy_split(400, 40, seed=2)
    trainer = HistogramTrainer()
    references: dict[int, tuple[Evaluated, Evaluated]] = {}
    results: list[PlantedResult] = []
    for k, (kind, seed) in enumerate(MIX):
        if seed not in references:  # the unplanted reference, trained once per seed, on dev and on train
            model = trainer.fit(train.images, train.masks, seed=seed)
            references[seed] = (Evaluated(dev, model.predict(dev.images)), Evaluated(train, model.predict(train.images)))
        cause = draw_cause(np.random.default_rng(100 + k), kind)  # random magnitude, fixed by the mix
        ref_dev, ref_train = references[seed]
        result, report = run_planted(cause, trainer, train, dev, ref_dev, seed=seed, reference_train=ref_train)
        results.append(result)
        if kind == "none":
            assert result.n_findings == 0 and report.recommendations[0].action == "leave_it", report.recommendations
    summary = rates(results)
    planted = [r for r in results if r.cause.kind != "none"]
    assert sum(r.recovered for r in planted) >= 2 / 3 * len(planted), [(r.cause.kind, r.named) for r in planted]
    assert summary["false_finding"].estimate == 0.0
    assert summary["recovery"].low <= summary["recovery"].estimate <= summary["recovery"].high
