"""Perceptual hashes (DCT pHash, 256 bits) and near-neighbour search between image sets.

``phash`` shrinks each image to 32x32 by area averaging, takes the 2-D DCT-II, keeps the
16x16 lowest frequencies (the DC term zeroed: it only says how bright the image is) and sets
one bit per coefficient above their median. A hash is 4 uint64 words.

Two images are near neighbours when their hashes differ in at most ``NEAR_NEIGHBOUR_BITS``
bits. Synthetic parts are smooth and alike, so a hash alone has a heavy tail of independent
look-alikes; ``near_duplicates`` therefore confirms each hash candidate by ``copy_rms``, the RMS
difference of the mean-removed 32x32 thumbnails (at most ``DUPLICATE_RMS``), which separates
re-noised copies from independent draws by a wide margin. ``analysis.curation.neardup`` applies
the same rule within one large set. Measured rates are in docs/synthetic.md.
"""

from __future__ import annotations

import numpy as np
from scipy.fft import dctn

HASH_SIDE = 32  # images are area-averaged to this side before the DCT
LOW_FREQ = 16  # the LOW_FREQ x LOW_FREQ lowest DCT frequencies make the 256 bits
HASH_WORDS = LOW_FREQ * LOW_FREQ // 64  # uint64 words per hash
NEAR_NEIGHBOUR_BITS = 40  # Hamming distance (of 256) at or below which hashes are near neighbours
DUPLICATE_RMS = 0.01  # thumbnail RMS difference (image units) at or below which a candidate is a copy
COMPARE_BLOCK = 512  # query hashes compared per block (memory: block x reference x 32 bytes)


def shrink(images: np.ndarray) -> np.ndarray:
    """(N, H, W) -> (N, 32, 32) area averages in the input's float type (bilinear resampling when a
    side is not a multiple of 32). Two summing passes: twice as fast as a reshape-mean."""
    n, h, w = images.shape
    if h % HASH_SIDE or w % HASH_SIDE:
        from scipy.ndimage import zoom

        return np.stack(
            [
                zoom(img, (HASH_SIDE / h, HASH_SIDE / w), order=1, grid_mode=True, mode="nearest")
                for img in images
            ]
        )
    fy, fx = h // HASH_SIDE, w // HASH_SIDE
    rows = images.reshape(n, HASH_SIDE, fy, w).sum(axis=2)  # (N, 32, W)
    out: np.ndarray = rows.reshape(n, HASH_SIDE, HASH_SIDE, fx).sum(axis=3) * images.dtype.type(1 / (fy * fx))
    return out


def phash(images: np.ndarray) -> np.ndarray:
    """Hashes as uint64 words: an image (H, W) -> (4,), a stack (N, H, W) -> (N, 4)."""
    stack = np.asarray(images, dtype=np.float64)
    single = stack.ndim == 2
    if single:
        stack = stack[None]
    coeffs = dctn(shrink(stack), type=2, axes=(1, 2), norm="ortho")[:, :LOW_FREQ, :LOW_FREQ]
    flat = coeffs.reshape(len(stack), LOW_FREQ * LOW_FREQ)
    flat[:, 0] = 0.0  # the DC term says only how bright the image is
    bits = flat > np.median(flat[:, 1:], axis=1, keepdims=True)
    packed = np.packbits(bits, axis=1)  # (N, 32) bytes
    hashes = np.ascontiguousarray(packed).view(">u8").astype(np.uint64)  # (N, 4)
    return hashes[0] if single else hashes


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distance of broadcastable hash arrays (..., 4) -> (...)."""
    return np.bitwise_count(np.bitwise_xor(a, b)).sum(axis=-1, dtype=np.int64)


def min_distances(query: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """For each query hash, the smallest Hamming distance to any reference hash."""
    out = np.empty(len(query), dtype=np.int64)
    for start in range(0, len(query), COMPARE_BLOCK):
        block = query[start : start + COMPARE_BLOCK, None, :]
        out[start : start + len(block)] = hamming(block, reference[None, :, :]).min(axis=1)
    return out


def near_neighbours(
    query: np.ndarray, reference: np.ndarray, threshold: int = NEAR_NEIGHBOUR_BITS
) -> list[tuple[int, int]]:
    """Pairs (query index, reference index) within ``threshold`` bits of each other."""
    pairs: list[tuple[int, int]] = []
    for start in range(0, len(query), COMPARE_BLOCK):
        block = query[start : start + COMPARE_BLOCK, None, :]
        qi, ri = np.nonzero(hamming(block, reference[None, :, :]) <= threshold)
        pairs.extend(zip((qi + start).tolist(), ri.tolist(), strict=True))
    return pairs


def copy_rms(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The copy rule's distance for aligned image stacks (N, H, W): the RMS of the difference of
    their mean-removed 32x32 thumbnails, one value per pair (image units)."""
    ta, tb = (shrink(np.asarray(x, dtype=np.float32)) for x in (a, b))
    diff = (ta - ta.mean(axis=(1, 2), keepdims=True)) - (tb - tb.mean(axis=(1, 2), keepdims=True))
    out: np.ndarray = np.sqrt((diff.astype(np.float64) ** 2).mean(axis=(1, 2)))
    return out


def near_duplicates(query: np.ndarray, reference: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (query index, reference index) of two image stacks that are copies up to noise and a
    brightness offset: hashes within ``NEAR_NEIGHBOUR_BITS`` bits, confirmed by ``copy_rms`` at
    most ``DUPLICATE_RMS``. (Duplicates within one large set: ``analysis.curation.neardup``.)
    """
    pairs = near_neighbours(phash(query), phash(reference))
    if not pairs:
        return []
    qi, ri = (np.array(side) for side in zip(*pairs, strict=True))
    keep = copy_rms(np.asarray(query)[qi], np.asarray(reference)[ri]) <= DUPLICATE_RMS
    return [pair for pair, ok in zip(pairs, keep.tolist(), strict=True) if ok]
