"""Losses, augmentations, crops and oversampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vision.augment import augment
from vision.config import AugmentConfig, LossTerm, Range, SamplingConfig
from vision.data import crop_batch, has_small_void, sample_weights
from vision.losses import combined_loss, term_loss


@pytest.fixture
def pair() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 1, 8, 8, generator=g), (torch.rand(2, 1, 8, 8, generator=g) > 0.8).float()


def test_focal_with_gamma_zero_is_bce(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    logits, y = pair
    focal = term_loss(LossTerm(name="focal", focal_gamma=0.0), logits, y)
    assert torch.allclose(focal, F.binary_cross_entropy_with_logits(logits, y))


def test_tversky_half_half_is_dice(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    logits, y = pair
    tv = term_loss(LossTerm(name="tversky", tversky_alpha=0.5, tversky_beta=0.5), logits, y)
    assert torch.allclose(tv, term_loss(LossTerm(name="dice"), logits, y))


def test_combination_is_the_weighted_sum(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    logits, y = pair
    terms = [LossTerm(name="bce", weight=2.0), LossTerm(name="dice", weight=0.5)]
    expected = 2 * term_loss(terms[0], logits, y) + 0.5 * term_loss(terms[1], logits, y)
    assert torch.allclose(combined_loss(terms, logits, y), expected)


def test_augment_is_seeded_and_keeps_masks_binary() -> None:
    cfg = AugmentConfig(
        p=1.0,
        shift_px=Range(low=0, high=3),
        scale=Range(low=0.9, high=1.2),
        noise_std=Range(low=0, high=0.05),
        blur_sigma=Range(low=0, high=1.5),
        gain=Range(low=0.8, high=1.2),
        gradient=Range(low=0, high=0.2),
    )
    x = torch.rand(4, 1, 16, 16)
    y = (torch.rand(4, 1, 16, 16) > 0.9).float()
    a = augment(x, y, cfg, torch.Generator().manual_seed(3))
    b = augment(x, y, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert set(a[1].unique().tolist()) <= {0.0, 1.0} and 0 <= a[0].min() and a[0].max() <= 1
    off = AugmentConfig(flip=False)
    same = augment(x, y, off, torch.Generator().manual_seed(3))
    assert torch.equal(same[0], x) and torch.equal(same[1], y)


def test_defect_centred_crops_contain_a_void() -> None:
    images = np.random.default_rng(0).random((20, 32, 32), dtype=np.float32)
    masks = np.zeros((20, 32, 32), np.uint8)
    masks[:, 28, 3] = 1  # one pixel in a corner
    cfg = SamplingConfig(crop=8, defect_centred_p=1.0)
    x, y = crop_batch(images, masks, cfg, np.random.default_rng(1))
    assert x.shape == (20, 8, 8) and all(y[i].any() for i in range(20))


def test_rare_defect_oversampling_weights() -> None:
    masks = np.zeros((3, 16, 16), np.uint8)
    masks[0, 2, 2] = 1  # small void
    masks[1, 4:10, 4:10] = 1  # large void
    assert has_small_void(masks, 16).tolist() == [True, False, False]
    weights = sample_weights(masks, SamplingConfig(rare_oversample=4.0))
    assert weights is not None and weights.tolist() == [4.0, 1.0, 1.0]
    assert sample_weights(masks, SamplingConfig()) is None
