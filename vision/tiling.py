"""Whole-image inference within a bounded memory: batches sized by pixels, large images in tiles.

Real radiographs are often 1-4 k pixels a side. An image with a side above ``TILE_PX`` is scored
on overlapping ``TILE_PX`` x ``TILE_PX`` tiles (stride ``TILE_PX - OVERLAP_PX``, the last tile of
a row or column flush with the edge); each output pixel is the mean of the tiles that cover it.
Every forward pass holds at most ``BATCH_PIXELS`` input pixels (at least one image or tile) and
at most the caller's own batch, so images up to 128 px keep the batches they always had (scores
do not move) and the tiles of a 2048-px radiograph need no more memory than those.

numpy only, so that the trainer (torch, dev metrics in the sandbox), the host's in-process
onnxruntime and the gate's confined scorer all score an image in exactly the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

TILE_PX = 512  # tile side; images up to this size on both sides are scored whole
OVERLAP_PX = 64  # overlap of neighbouring tiles (the U-Net's border effects fall in it)
BATCH_PIXELS = 128 * 128 * 128  # input pixels per forward pass: 128 images of 128 px, eight 512-px tiles
DEV_BATCH = 128  # images per forward pass when the trainer scores dev (fewer when large)

Predict = Callable[[np.ndarray], np.ndarray]  # (n, h, w) float32 -> probabilities (n, h, w)


def starts(length: int, tile: int = TILE_PX, overlap: int = OVERLAP_PX) -> list[int]:
    """Offsets of the tiles along one side: stride ``tile - overlap``, the last flush with the end."""
    if length <= tile:
        return [0]
    stride = tile - overlap
    offsets = list(range(0, length - tile, stride))
    return [*offsets, length - tile]


def tile_boxes(height: int, width: int) -> list[tuple[int, int]]:
    """(y, x) of every tile of an image; each tile is ``min(TILE_PX, side)`` on that side."""
    return [(y, x) for y in starts(height) for x in starts(width)]


def per_batch(height: int, width: int, max_batch: int) -> int:
    """Images (or tiles) of that size per forward pass: within ``BATCH_PIXELS`` and ``max_batch``,
    at least one."""
    return max(1, min(max_batch, BATCH_PIXELS // max(1, height * width)))


def predict_batched(predict: Predict, images: np.ndarray, max_batch: int) -> np.ndarray:
    """``predict`` over ``images`` (N, H, W) in pixel-bounded batches; tiles above ``TILE_PX``."""
    n, height, width = images.shape
    if max(height, width) > TILE_PX:
        return _predict_tiled(predict, images, max_batch)
    step = per_batch(height, width, max_batch)
    parts = [np.asarray(predict(images[i : i + step]), dtype=np.float32) for i in range(0, n, step)]
    return np.concatenate(parts) if parts else np.zeros((0, height, width), np.float32)


def _predict_tiled(predict: Predict, images: np.ndarray, max_batch: int) -> np.ndarray:
    n, height, width = images.shape
    th, tw = min(TILE_PX, height), min(TILE_PX, width)
    boxes = tile_boxes(height, width)
    cover = np.zeros((height, width), np.float32)
    for y, x in boxes:
        cover[y : y + th, x : x + tw] += 1.0
    step = per_batch(th, tw, max_batch)
    out = np.empty((n, height, width), np.float32)
    for i in range(n):
        tiles = np.stack([images[i, y : y + th, x : x + tw] for y, x in boxes])
        probs = np.concatenate(
            [np.asarray(predict(tiles[j : j + step]), dtype=np.float32) for j in range(0, len(tiles), step)]
        )
        total = np.zeros((height, width), np.float32)
        for (y, x), prob in zip(boxes, probs, strict=True):
            total[y : y + th, x : x + tw] += prob
        out[i] = total / cover
    return out


__all__ = [
    "BATCH_PIXELS",
    "DEV_BATCH",
    "OVERLAP_PX",
    "TILE_PX",
    "per_batch",
    "predict_batched",
    "starts",
    "tile_boxes",
]
