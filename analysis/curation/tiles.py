"""Overlapping tiles: images that share an exactly equal region at some offset, and their source.

Tiles cut from one radiograph share the pixels of their overlap. Every image is quantised to
16 bits; the ``BLOCK`` x ``BLOCK`` blocks on a grid of stride ``BLOCK`` of every image are hashed
(a separable 2-D polynomial hash, exact in uint64 arithmetic), and the same hash is computed at
*every* position of every image. Two tiles overlapping by at least ``2 * BLOCK`` pixels per axis
contain a whole grid block of one inside the other, so a hash match at position p in image B
of a grid block at q in image A says "A sits at offset p - q in B". Offsets with at least
``MIN_VOTES`` agreeing blocks count. Tiles linked by overlaps form one source image; each tile's
position in the source frame follows from the offsets. Flat blocks (they would match anything
flat) are skipped.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

BLOCK = 16  # pixels per side of a hashed block; overlaps under 2 * BLOCK per axis may be missed
MIN_VOTES = 2  # grid blocks that must agree on an offset
FLAT_LEVELS = 64  # a block whose 16-bit range is below this is flat and not hashed
CHUNK = 256  # images hashed per step
_W = np.random.default_rng(7).integers(1, 2**63, size=(2, BLOCK), dtype=np.uint64) | np.uint64(1)


@dataclass(frozen=True)
class Overlap:
    """Image ``a`` sits at offset (dy, dx) inside image ``b``'s frame; they share ``fraction`` of a."""

    a: int
    b: int
    dy: int
    dx: int
    fraction: float


def _window_hashes(q: np.ndarray) -> np.ndarray:
    """(B, H, W) uint64 -> (B, H-15, W-15) hashes of every BLOCK x BLOCK window."""
    rows = sliding_window_view(q, BLOCK, axis=2) @ _W[0]  # (B, H, W-15)
    out: np.ndarray = sliding_window_view(rows, BLOCK, axis=1) @ _W[1]  # (B, H-15, W-15)
    return out


def _quantise(block: np.ndarray) -> np.ndarray:
    return np.round(np.clip(np.nan_to_num(block), 0, 1) * 65535).astype(np.uint64)


def find_overlaps(images: np.ndarray) -> list[Overlap]:
    """Every pair of distinct positions whose images overlap at a non-zero offset."""
    n, h, w = images.shape
    if h < 2 * BLOCK or w < 2 * BLOCK:
        return []
    grid_keys, grid_ids = [], []
    for start in range(0, n, CHUNK):
        q = _quantise(np.asarray(images[start : start + CHUNK], dtype=np.float32))
        hashes = _window_hashes(q)[:, ::BLOCK, ::BLOCK]  # (B, gy, gx)
        blocks = sliding_window_view(q, (BLOCK, BLOCK), axis=(1, 2))[:, ::BLOCK, ::BLOCK]
        flat = (blocks.max(axis=(3, 4)) - blocks.min(axis=(3, 4))) < FLAT_LEVELS
        b, gy, gx = np.nonzero(~flat)
        grid_keys.append(hashes[b, gy, gx])
        grid_ids.append(np.stack([b + start, gy * BLOCK, gx * BLOCK], axis=1))
    keys = np.concatenate(grid_keys)
    ids = np.concatenate(grid_ids)
    if not len(keys):
        return []
    order = np.argsort(keys)
    keys, ids = keys[order], ids[order]
    votes: dict[tuple[int, int, int, int], int] = defaultdict(int)
    for start in range(0, n, CHUNK):
        q = _quantise(np.asarray(images[start : start + CHUNK], dtype=np.float32))
        hashes = _window_hashes(q)
        pos = np.minimum(np.searchsorted(keys, hashes), len(keys) - 1)
        b, y, x = np.nonzero(keys[pos] == hashes)
        for bb, yy, xx in zip((b + start).tolist(), y.tolist(), x.tolist(), strict=True):
            key = hashes[bb - start, yy, xx]
            lo, hi = np.searchsorted(keys, key, "left"), np.searchsorted(keys, key, "right")
            for a, ya, xa in ids[lo:hi].tolist():
                dy, dx = yy - ya, xx - xa
                if a != bb and (dy, dx) != (0, 0):
                    votes[(a, bb, dy, dx)] += 1
    found = [
        Overlap(a, b, dy, dx, (h - abs(dy)) * (w - abs(dx)) / (h * w))
        for (a, b, dy, dx), v in votes.items()
        if v >= MIN_VOTES and a < b
    ]
    return sorted(found, key=lambda o: (o.a, o.b))


def trace_sources(overlaps: list[Overlap]) -> list[dict[int, tuple[int, int]]]:
    """Group overlapping tiles into source images: each group maps tile -> (y, x) in the source frame."""
    links: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for o in overlaps:
        links[o.a].append((o.b, -o.dy, -o.dx))  # b's origin in a's frame
        links[o.b].append((o.a, o.dy, o.dx))  # a's origin in b's frame
    seen: set[int] = set()
    groups = []
    for root in sorted(links):
        if root in seen:
            continue
        pos = {root: (0, 0)}
        queue = deque([root])
        while queue:
            tile = queue.popleft()
            for other, dy, dx in links[tile]:
                if other not in pos:
                    pos[other] = (pos[tile][0] + dy, pos[tile][1] + dx)
                    queue.append(other)
        seen.update(pos)
        y0 = min(p[0] for p in pos.values())
        x0 = min(p[1] for p in pos.values())
        groups.append({t: (p[0] - y0, p[1] - x0) for t, p in sorted(pos.items())})
    return groups
