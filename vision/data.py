"""Training data: dataset versions, the epoch sampler, defect-centred crops."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import ndimage

from segfactory.errors import DataError
from synthetic.splits import Split, read_split
from vision.config import SamplingConfig


@dataclass
class DatasetVersion:
    train: Split
    dev: Split


def load_version(path: Path) -> DatasetVersion:
    """A dataset version folder: ``train/`` and ``dev/`` split folders with the same image size."""
    if not path.is_dir():
        raise DataError(f"dataset {path} not found; give a dataset version folder holding train/ and dev/")
    missing = [name for name in ("train", "dev") if not (path / name).is_dir()]
    if missing:
        raise DataError(f"{path} is not a dataset version: missing {', '.join(missing)}/")
    version = DatasetVersion(read_split(path / "train"), read_split(path / "dev"))
    for name, split in (("train", version.train), ("dev", version.dev)):
        if len(split) == 0:
            raise DataError(f"{path / name} holds no images; the dataset is empty")
    if version.train.images.shape[1:] != version.dev.images.shape[1:]:
        raise DataError(
            f"train images {version.train.images.shape[1:]} and dev images "
            f"{version.dev.images.shape[1:]} differ in size"
        )
    return version


def load_eval_split(path: Path) -> Split:
    """A split folder, or a dataset version (its dev split)."""
    if (path / "dev").is_dir() and not (path / "images.npy").exists():
        path = path / "dev"
    if not path.is_dir():
        raise DataError(f"data {path} not found; give a split folder or a dataset version")
    split = read_split(path)
    if len(split) == 0:
        raise DataError(f"{path} holds no images; the dataset is empty")
    return split


def has_small_void(masks: np.ndarray, area_px: int) -> np.ndarray:
    """(N,) bool: the image holds a void component smaller than ``area_px`` pixels."""
    struct = np.zeros((3, 3, 3), dtype=bool)
    struct[1] = True
    labels, count = ndimage.label(masks.astype(bool), structure=struct)
    if count == 0:
        return np.zeros(masks.shape[0], dtype=bool)
    flat = labels.ravel()
    area = np.bincount(flat, minlength=count + 1)
    image = np.zeros(count + 1, dtype=np.int64)
    nz = np.flatnonzero(flat)
    image[flat[nz]] = nz // (masks.shape[1] * masks.shape[2])
    small = np.flatnonzero(area[1:] < area_px) + 1
    out = np.zeros(masks.shape[0], dtype=bool)
    out[image[small]] = True
    return out


def epoch_order(n: int, weights: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Indices for one epoch: a permutation, or n weighted draws with replacement."""
    if weights is None:
        return rng.permutation(n)
    p = weights / weights.sum()
    return rng.choice(n, size=n, replace=True, p=p)


def sample_weights(masks: np.ndarray, cfg: SamplingConfig) -> np.ndarray | None:
    """Per-image sampling weights for rare-defect oversampling (None: uniform)."""
    if cfg.rare_oversample == 1.0:
        return None
    return np.where(has_small_void(masks, cfg.rare_area_px), cfg.rare_oversample, 1.0)


def crop_batch(
    images: np.ndarray, masks: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Crop each image to ``cfg.crop``; a ``defect_centred_p`` share is centred on a void pixel."""
    side = cfg.crop
    n, h, w = images.shape
    if side is None or (side >= h and side >= w):
        return images, masks
    side = min(side, h, w)
    out_x = np.empty((n, side, side), dtype=images.dtype)
    out_y = np.empty((n, side, side), dtype=masks.dtype)
    for i in range(n):
        ys, xs = np.nonzero(masks[i])
        if ys.size and rng.random() < cfg.defect_centred_p:
            k = int(rng.integers(ys.size))
            y0, x0 = int(ys[k]) - side // 2, int(xs[k]) - side // 2
        else:
            y0, x0 = int(rng.integers(h - side + 1)), int(rng.integers(w - side + 1))
        y0, x0 = min(max(y0, 0), h - side), min(max(x0, 0), w - side)
        out_x[i] = images[i, y0 : y0 + side, x0 : x0 + side]
        out_y[i] = masks[i, y0 : y0 + side, x0 : x0 + side]
    return out_x, out_y
