"""Reference-relative analysis: a collapsed candidate, the seed-noise band of several seeds,
and the mechanical image-level count slice."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.report import Evaluated, Extras, analyse
from analysis.slices import SLICE_NOISE_LEVEL, Units, find_slices
from analysis.toy import HistogramTrainer, ToySplit, toy_split
from segfactory.stats import noise_edge

Fitted = tuple[ToySplit, ToySplit, np.ndarray, np.ndarray]


@pytest.fixture(scope="module")
def fitted() -> Fitted:
    train, dev = toy_split(300, 40, seed=11), toy_split(300, 40, seed=12)
    model = HistogramTrainer().fit(train.images, train.masks, seed=0)
    return train, dev, model.predict(train.images), model.predict(dev.images)


def _relative(fitted: Fitted, cand_dev: np.ndarray, cand_train: np.ndarray) -> list[str]:
    train, dev, ptrain, pdev = fitted
    extras = Extras(
        reference=Evaluated(dev, pdev),
        reference_train=Evaluated(train, ptrain),
        train=Evaluated(train, cand_train),
        label_estimate=False,
    )
    report, _ = analyse(Evaluated(dev, cand_dev), extras=extras)
    return [r.id for r in report.recommendations]


def test_a_collapsed_candidate_that_fits_nothing_is_a_capacity_problem(fitted: Fitted) -> None:
    _, _, ptrain, pdev = fitted
    ids = _relative(fitted, np.zeros_like(pdev), np.zeros_like(ptrain))  # cannot fit its own training masks
    assert ids[0] == "model-underfit-0" and "labels-teach-nothing-0" in ids


def test_a_collapsed_candidate_that_fits_its_training_masks_points_at_the_labels(fitted: Fitted) -> None:
    train, _, ptrain, pdev = fitted
    ids = _relative(
        fitted, np.zeros_like(pdev), train.masks.astype(np.float32)
    )  # fits its train masks exactly
    assert ids[0] == "labels-teach-nothing-0"
    assert not any(i.startswith("targeted-synthetic") for i in ids)  # slices of a collapse are withdrawn


def test_a_candidate_finding_voids_where_its_training_masks_say_none_points_at_the_labels(
    fitted: Fitted,
) -> None:
    train, dev, ptrain, pdev = fitted
    erased = train.masks.copy()
    erased[: len(erased) // 2] = 0  # half the training masks lose their voids; the model still finds them
    extras = Extras(
        reference=Evaluated(dev, pdev),
        reference_train=Evaluated(train, ptrain),
        train=Evaluated(ToySplit(train.images, erased, train.image_meta, train.defects), ptrain),
        label_estimate=False,
    )
    report, _ = analyse(Evaluated(dev, pdev), extras=extras)
    top = report.recommendations[0]
    assert top.id == "labels-miss-voids-0" and top.action == "label_fix"
    assert (
        top.evidence["train_empty_images_with_a_void_found"]
        > top.evidence["dev_empty_images_with_a_void_found"]
    )
    assert any(n.startswith("images labelled empty where the model finds a void") for n in report.notes)


def test_an_unchanged_candidate_is_left_alone(fitted: Fitted) -> None:
    _, _, ptrain, pdev = fitted
    assert _relative(fitted, pdev, ptrain) == ["leave-it-0"]


def _units(rng: np.random.Generator, n: int = 400) -> tuple[Units, np.ndarray]:
    attr = np.array(["a", "b"] * (n // 2), dtype=object)
    outcome = (rng.random(n) < np.where(attr == "a", 0.6, 0.2)).astype(float)
    return Units("defect", {"kind": attr}, outcome, np.arange(n)), attr


def test_the_noise_band_reaches_past_the_largest_effect_any_unplanted_seed_shows() -> None:
    units, attr = _units(np.random.default_rng(0))
    quiet, loud = np.zeros(len(units)), np.where(attr == "a", 0.5, 0.0)
    assert any(r.confirmed for r in find_slices(units, seed=1, noise=[quiet]).rows)
    banded = find_slices(units, seed=1, noise=[quiet, loud]).rows
    edge = noise_edge([0.0, 0.5], upper=True, level=SLICE_NOISE_LEVEL)  # the prediction bound of [0, 0, 0.5]
    assert not any(r.confirmed for r in banded) and max(r.noise_effect for r in banded) == pytest.approx(edge)
    assert edge > 0.5


def test_a_relative_image_count_slice_is_not_sliced(fitted: Fitted) -> None:
    train, dev, ptrain, pdev = fitted
    half = pdev * 0.0
    half[::2] = pdev[::2]  # worse on every other image, whatever it holds
    extras = Extras(
        reference=Evaluated(dev, pdev), reference_train=Evaluated(train, ptrain), label_estimate=False
    )
    report, _ = analyse(Evaluated(dev, half), extras=extras)
    assert not any(r.unit == "image" and "count" in r.attributes for r in report.slices)
    assert any(r.unit == "defect" and "count" in r.attributes for r in report.slices)
