"""Near-duplicate search that scales: streamed fingerprints, blocking and LSH, an exact reference.

Two images are near duplicates when they are copies by the rule of ``synthetic.phash`` (256-bit
pHashes within ``NEAR_NEIGHBOUR_BITS`` bits and mean-removed 32x32 thumbnails within
``DUPLICATE_RMS``; catches re-noised, re-exposed copies) *or* their embeddings have cosine
similarity of at least ``EMBED_MIN_COSINE`` (noisy or shifted copies: pHash moves ~50 bits under
a 2-pixel shift). The embedding needs no training: the log-magnitude of the low-frequency
Fourier spectrum of the 32x32 area average (a shift changes only the phase), centred on the
set's mean and scaled to unit norm.

Scaling. Images are read from a (memory-mapped) ``(N, H, W)`` array ``CHUNK_IMAGES`` at a time;
per image we keep 32 bytes of hash and 480 bytes of embedding. pHash pairs come from
multi-index hashing: the 256 bits are cut into ``m >= (t + 1) / 3`` bands and, by the pigeonhole
principle, two hashes within ``t`` bits differ in at most two bits on some band, so probing each
band's key and its neighbours within two bits finds every pair an all-pairs search finds
(exact recall). Embedding pairs come from random-hyperplane LSH
(``LSH_TABLES`` tables of ``LSH_BITS`` bits; recall below 1, measured against
``all_embedding_pairs``). The LSH bucket scan is a numba kernel. Past ``MAX_PAIRS`` pairs: LimitExceeded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from scipy import fft as scipy_fft

from segfactory.errors import LimitExceeded, UsageError
from synthetic.phash import DUPLICATE_RMS, HASH_WORDS, NEAR_NEIGHBOUR_BITS, copy_rms, hamming, phash, shrink
from synthetic.splits import image_sha256

CHUNK_IMAGES = 1024  # images decoded per step of the stream (96x96: ~75 MB as float64)
EMBED_FREQ = 8  # Fourier frequencies kept per axis (both signs on the first axis): 15 x 8 = 120 dims
EMBED_DIMS = (2 * EMBED_FREQ - 1) * EMBED_FREQ
EMBED_MIN_COSINE = 0.95  # embedding cosine at or above which two images are near duplicates
LSH_TABLES = 16  # random-hyperplane hash tables for the embedding search
LSH_BITS = 12  # hyperplanes (key bits) per table
LSH_SEED = 20261130  # the hyperplanes are fixed so that results repeat
MAX_PAIRS = 20_000_000  # past this many pairs at the threshold the search raises LimitExceeded
HASH_BITS = 64 * HASH_WORDS  # 256
PROBE_RADIUS = 2  # band keys are probed with every change of up to this many bits
MIN_BANDS = 13  # at least this many bands: keys of <= 20 bits, a direct table of <= 8 MiB per band

__all__ = [
    "CHUNK_IMAGES",
    "DUPLICATE_RMS",
    "EMBED_DIMS",
    "EMBED_MIN_COSINE",
    "MAX_PAIRS",
    "NEAR_NEIGHBOUR_BITS",
    "Fingerprints",
    "Pairs",
    "all_embedding_pairs",
    "all_pairs",
    "candidate_pairs",
    "embed",
    "embedding_pairs",
    "fingerprint",
    "hash_duplicates",
    "near_duplicates",
    "thumbnail_rms",
    "union",
]


@dataclass
class Fingerprints:
    """What the search keeps per image: the pHash, the embedding and (optionally) the exact hash."""

    hashes: np.ndarray  # (N, 4) uint64
    embeddings: np.ndarray  # (N, EMBED_DIMS) float32, centred on the set's mean, unit norm
    sha256: list[str] | None = None

    def __len__(self) -> int:
        return int(self.hashes.shape[0])


@dataclass
class Pairs:
    """Pairs ``i < j`` with their Hamming distance and embedding cosine."""

    i: np.ndarray  # (P,) int64
    j: np.ndarray  # (P,) int64
    bits: np.ndarray  # (P,) int64
    cosine: np.ndarray  # (P,) float32

    def __len__(self) -> int:
        return int(self.i.shape[0])

    def where(self, max_bits: int, min_cosine: float) -> Pairs:
        keep = (self.bits <= max_bits) & (self.cosine >= min_cosine)
        return Pairs(self.i[keep], self.j[keep], self.bits[keep], self.cosine[keep])

    def as_set(self) -> set[tuple[int, int]]:
        return set(zip(self.i.tolist(), self.j.tolist(), strict=True))


def embed(images: np.ndarray) -> np.ndarray:
    """Training-free, shift-tolerant embedding: (N, H, W) -> (N, EMBED_DIMS) float32.

    The log-magnitude of the low-frequency 2-D Fourier spectrum of the 32x32 area average
    (the image mean removed). A translation changes only the phase, so a shifted copy keeps
    its embedding; fresh pixel noise barely moves the low frequencies. Not yet centred.
    """
    return _spectrum(shrink(np.asarray(images, dtype=np.float32)))


def _spectrum(small: np.ndarray) -> np.ndarray:
    """The embedding of already shrunk (N, 32, 32) images."""
    small = small - small.mean(axis=(1, 2), keepdims=True)
    spectrum = np.abs(scipy_fft.rfft2(small.astype(np.float32), workers=-1))  # (N, 32, 17)
    low = np.concatenate(
        [spectrum[:, :EMBED_FREQ, :EMBED_FREQ], spectrum[:, -EMBED_FREQ + 1 :, :EMBED_FREQ]], axis=1
    )
    out: np.ndarray = np.log1p(low.reshape(len(small), -1)).astype(np.float32)
    return out


def _normalise(raw: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Centre on the dataset's mean embedding and scale to unit norm (a flat image maps to 0)."""
    x = raw - centre
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    out: np.ndarray = np.where(norm > 1e-8, x / np.maximum(norm, 1e-8), 0.0).astype(np.float32)
    return out


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def fingerprint(images: np.ndarray, *, exact: bool = False, chunk: int = CHUNK_IMAGES) -> Fingerprints:
    """Stream over ``images`` (a memmap is read one chunk at a time) and fingerprint each image."""
    n = int(images.shape[0])
    hashes = np.empty((n, HASH_WORDS), dtype=np.uint64)
    embeddings = np.empty((n, EMBED_DIMS), dtype=np.float32)
    digests: list[str] | None = [] if exact else None
    for part in _chunks(n, chunk):
        block = np.asarray(images[part], dtype=np.float32)  # the only decoded copy
        small = shrink(block)  # (B, 32, 32): shared by the hash and the embedding
        hashes[part] = phash(small)  # shrinking a 32x32 image again is the identity
        embeddings[part] = _spectrum(small)
        if digests is not None:
            digests.extend(image_sha256(img) for img in block)
    centre = embeddings.mean(axis=0, keepdims=True) if n else np.zeros((1, EMBED_DIMS), np.float32)
    for part in _chunks(n, chunk):
        embeddings[part] = _normalise(embeddings[part], centre)
    return Fingerprints(hashes, embeddings, digests)


def _band_keys(hashes: np.ndarray, n_bands: int) -> np.ndarray:
    """(n_bands, N) uint32 keys: the hash bits cut into ``n_bands`` near-equal bands."""
    bits = np.unpackbits(np.ascontiguousarray(hashes.astype(">u8")).view(np.uint8), axis=1)  # (N, 256)
    edges = np.linspace(0, HASH_BITS, n_bands + 1).round().astype(int)
    keys = np.empty((n_bands, len(hashes)), dtype=np.uint32)
    for b in range(n_bands):
        band = bits[:, edges[b] : edges[b + 1]].astype(np.uint32)
        keys[b] = band @ (np.uint32(1) << np.arange(band.shape[1], dtype=np.uint32))
    return keys


@numba.njit(cache=True, inline="always")
def _popcount64(x: np.uint64) -> int:  # pragma: no cover - compiled
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


def _cosines(emb: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    out = np.empty(len(i), dtype=np.float32)
    for part in _chunks(len(i), 1 << 20):
        out[part] = np.einsum("pd,pd->p", emb[i[part]], emb[j[part]])
    return out


@numba.njit(cache=True)
def _probe_kernel(
    keys: np.ndarray, width: int, flips: np.ndarray, hashes: np.ndarray, max_bits: int, cap: int
) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Pairs (i < j) whose band keys differ by one of ``flips`` and whose hashes are within max_bits.

    The band's images are bucketed by key in a direct-address table (counting sort), so each
    probe is one lookup.
    """
    n = keys.shape[0]
    starts = np.zeros((1 << width) + 1, np.int64)
    for a in range(n):
        starts[keys[a] + 1] += 1
    for k in range(1, starts.shape[0]):
        starts[k] += starts[k - 1]
    fill = starts[:-1].copy()
    order = np.empty(n, np.int64)
    for a in range(n):
        order[fill[keys[a]]] = a
        fill[keys[a]] += 1
    out_i = np.empty(cap, np.int64)
    out_j = np.empty(cap, np.int64)
    count = 0
    for a in range(n):
        for f in range(flips.shape[0]):
            probe = keys[a] ^ flips[f]
            for p in range(starts[probe], starts[probe + 1]):
                c = order[p]
                if c <= a:
                    continue
                d = 0
                for w in range(hashes.shape[1]):
                    d += _popcount64(hashes[a, w] ^ hashes[c, w])
                if d <= max_bits:
                    if count >= cap:
                        return out_i, out_j, -1
                    out_i[count] = a
                    out_j[count] = c
                    count += 1
    return out_i, out_j, count


def _flips(width: int) -> np.ndarray:
    """Every key difference of at most PROBE_RADIUS bits within a band of ``width`` bits."""
    single = [1 << k for k in range(width)]
    double = [(1 << k) | (1 << m) for k in range(width) for m in range(k + 1, width)]
    return np.array([0, *single, *(double if PROBE_RADIUS >= 2 else [])], dtype=np.uint32)


def _probe_band(
    keys: np.ndarray, width: int, max_bits: int, hashes: np.ndarray, max_pairs: int
) -> tuple[np.ndarray, np.ndarray]:
    flips = _flips(width)
    cap = min(max_pairs, max(1024, 4 * len(keys)))
    while True:
        i, j, count = _probe_kernel(keys, width, flips, hashes, max_bits, cap)
        if count >= 0:
            return i[:count], j[:count]
        if cap >= max_pairs:
            raise LimitExceeded(
                f"more than MAX_PAIRS={max_pairs} image pairs within {max_bits} bits; "
                "lower the threshold or curate a smaller set"
            )
        cap = min(max_pairs, cap * 4)


def candidate_pairs(
    prints: Fingerprints, max_bits: int = NEAR_NEIGHBOUR_BITS, *, max_pairs: int = MAX_PAIRS
) -> Pairs:
    """Every pair within ``max_bits`` (exact, by multi-index hashing), with its embedding cosine.

    With m >= (max_bits + 1) / (r + 1) bands (r = PROBE_RADIUS), two hashes within max_bits
    bits differ in at most r bits on some band (else they would differ in >= (r + 1) m >
    max_bits), so probing each band's key and its neighbours within r bits finds every such pair.
    """
    if not 0 <= max_bits < HASH_BITS // 2:
        raise UsageError(f"max_bits must be in 0..{HASH_BITS // 2 - 1}; got {max_bits}")
    n_bands = max(MIN_BANDS, -(-(max_bits + 1) // (PROBE_RADIUS + 1)))
    keys = _band_keys(prints.hashes, n_bands)
    edges = np.linspace(0, HASH_BITS, n_bands + 1).round().astype(int)
    found = [
        _probe_band(keys[b], int(edges[b + 1] - edges[b]), max_bits, prints.hashes, max_pairs)
        for b in range(n_bands)
    ]
    i = np.concatenate([f[0] for f in found]).astype(np.int64)
    j = np.concatenate([f[1] for f in found]).astype(np.int64)
    n = max(1, len(prints))
    unique = np.unique(i * n + j)
    if len(unique) > max_pairs:
        raise LimitExceeded(
            f"{len(unique)} image pairs within {max_bits} bits, more than MAX_PAIRS={max_pairs}; "
            "lower the threshold or curate a smaller set"
        )
    i, j = unique // n, unique % n
    return Pairs(i, j, hamming(prints.hashes[i], prints.hashes[j]), _cosines(prints.embeddings, i, j))


def thumbnail_rms(images: Any, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """``synthetic.phash.copy_rms`` of each pair (i, j), reading only the pairs' images."""
    out = np.empty(len(i), dtype=np.float64)
    for part in _chunks(len(i), 512):
        out[part] = copy_rms(np.asarray(images[i[part]]), np.asarray(images[j[part]]))
    return out


def hash_duplicates(prints: Fingerprints, images: np.ndarray, max_bits: int = NEAR_NEIGHBOUR_BITS) -> Pairs:
    """Copies up to noise (``synthetic.phash`` rule): hash within ``max_bits``, thumbnails within
    DUPLICATE_RMS."""
    found = candidate_pairs(prints, max_bits)
    keep = thumbnail_rms(images, found.i, found.j) <= DUPLICATE_RMS
    return Pairs(found.i[keep], found.j[keep], found.bits[keep], found.cosine[keep])


def near_duplicates(
    prints: Fingerprints,
    images: np.ndarray,
    max_bits: int = NEAR_NEIGHBOUR_BITS,
    min_cosine: float = EMBED_MIN_COSINE,
) -> Pairs:
    """Near duplicates at the documented thresholds: hash copies (pHash + thumbnail RMS) or embedding
    cosine."""
    return union(hash_duplicates(prints, images, max_bits), embedding_pairs(prints, min_cosine))


def all_pairs(prints: Fingerprints, max_bits: int = NEAR_NEIGHBOUR_BITS, block: int = 512) -> Pairs:
    """The exact reference: compare every pair (O(N^2); for checking the blocked search)."""
    found_i, found_j, found_d = [], [], []
    h = prints.hashes
    for part in _chunks(len(h), block):
        dist = hamming(h[part, None, :], h[None, :, :])  # (block, N)
        qi, rj = np.nonzero(dist <= max_bits)
        qi = qi + part.start
        keep = qi < rj
        found_i.append(qi[keep])
        found_j.append(rj[keep])
        found_d.append(dist[qi[keep] - part.start, rj[keep]])
    i = np.concatenate(found_i).astype(np.int64) if found_i else np.zeros(0, np.int64)
    j = np.concatenate(found_j).astype(np.int64) if found_j else np.zeros(0, np.int64)
    d = np.concatenate(found_d).astype(np.int64) if found_d else np.zeros(0, np.int64)
    return Pairs(i, j, d, _cosines(prints.embeddings, i, j))


@numba.njit(cache=True)
def _scan_tables(
    keys: np.ndarray, orders: np.ndarray, emb: np.ndarray, min_cosine: float, cap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Every pair sharing a table key with cosine >= min_cosine, reported in its first shared table."""
    n_tables, n = keys.shape
    keys_t = np.ascontiguousarray(keys.T)  # (N, tables): one image's keys side by side
    out_i = np.empty(cap, np.int64)
    out_j = np.empty(cap, np.int64)
    out_c = np.empty(cap, np.float32)
    count = 0
    for b in range(n_tables):
        order = orders[b]
        start = 0
        while start < n:
            key = keys[b, order[start]]
            stop = start + 1
            while stop < n and keys[b, order[stop]] == key:
                stop += 1
            for p in range(start, stop):
                a = order[p]
                for q in range(p + 1, stop):
                    c = order[q]
                    seen = False
                    for e in range(b):  # report the pair only in the first table it shares
                        if keys_t[a, e] == keys_t[c, e]:
                            seen = True
                            break
                    if seen:
                        continue
                    dot = np.float32(0.0)
                    for w in range(emb.shape[1]):
                        dot += emb[a, w] * emb[c, w]
                    if dot >= min_cosine:
                        if count >= cap:
                            return out_i, out_j, out_c, -1
                        out_i[count] = min(a, c)
                        out_j[count] = max(a, c)
                        out_c[count] = dot
                        count += 1
            start = stop
    return out_i, out_j, out_c, count


def _lsh_keys(emb: np.ndarray, tables: int, bits: int) -> np.ndarray:
    """(tables, N) uint32 keys: signs of the embedding on fixed random hyperplanes."""
    planes = np.random.default_rng(LSH_SEED).standard_normal((tables, emb.shape[1], bits)).astype(np.float32)
    weights = np.uint32(1) << np.arange(bits, dtype=np.uint32)
    keys = np.empty((tables, len(emb)), dtype=np.uint32)
    for t in range(tables):
        for part in _chunks(len(emb), 1 << 16):
            keys[t, part] = ((emb[part] @ planes[t]) > 0).astype(np.uint32) @ weights
    return keys


def embedding_pairs(
    prints: Fingerprints,
    min_cosine: float = EMBED_MIN_COSINE,
    *,
    tables: int = LSH_TABLES,
    bits: int = LSH_BITS,
    max_pairs: int = MAX_PAIRS,
) -> Pairs:
    """Pairs with embedding cosine >= ``min_cosine`` found by random-hyperplane LSH (recall < 1, measured)."""
    keys = _lsh_keys(prints.embeddings, tables, bits)
    orders = np.argsort(keys, axis=1, kind="stable").astype(np.int64)
    cap = min(max_pairs, max(1024, 4 * len(prints)))
    while True:
        i, j, c, count = _scan_tables(keys, orders, prints.embeddings, float(min_cosine), cap)
        if count >= 0:
            break
        if cap >= max_pairs:
            raise LimitExceeded(
                f"more than MAX_PAIRS={max_pairs} image pairs with cosine >= {min_cosine}; "
                "raise the threshold or curate a smaller set"
            )
        cap = min(max_pairs, cap * 4)
    order = np.lexsort((j[:count], i[:count]))
    i, j = i[:count][order], j[:count][order]
    return Pairs(i, j, hamming(prints.hashes[i], prints.hashes[j]), c[:count][order])


def union(a: Pairs, b: Pairs) -> Pairs:
    """Pairs found by either search (each pair once)."""
    i = np.concatenate([a.i, b.i])
    j = np.concatenate([a.j, b.j])
    _, first = np.unique(i * (1 << 32) + j, return_index=True)
    return Pairs(
        i[first],
        j[first],
        np.concatenate([a.bits, b.bits])[first],
        np.concatenate([a.cosine, b.cosine])[first],
    )


def all_embedding_pairs(
    prints: Fingerprints, min_cosine: float = EMBED_MIN_COSINE, block: int = 1024
) -> Pairs:
    """The exact reference for ``embedding_pairs``: every pair's cosine (O(N^2))."""
    e = prints.embeddings
    found_i, found_j = [], []
    for part in _chunks(len(e), block):
        qi, rj = np.nonzero(e[part] @ e.T >= min_cosine)
        qi = qi + part.start
        keep = qi < rj
        found_i.append(qi[keep])
        found_j.append(rj[keep])
    i = np.concatenate(found_i).astype(np.int64) if found_i else np.zeros(0, np.int64)
    j = np.concatenate(found_j).astype(np.int64) if found_j else np.zeros(0, np.int64)
    return Pairs(i, j, hamming(prints.hashes[i], prints.hashes[j]), _cosines(e, i, j))
