"""Realism statistics of one image set: void sizes, contrast, noise power spectrum, edge profiles.

Everything here reduces a set to aggregates (histograms, means, spectra); no per-image array
leaves this module, so a report built from it cannot show a real image.

- Voids are 8-connected mask components per image (never across images).
- Contrast is the Michelson contrast ``|v - r| / (v + r)`` of a void's mean intensity ``v``
  against the mean ``r`` of the ring ``0 < d <= RING_PX`` outside it (as ``data import`` does).
- The noise power spectrum is that of the residual ``image - gaussian(image, NPS_SIGMA_PX)``
  (structure removed), radially averaged into ``NPS_BINS`` bins of spatial frequency.
- The edge profile is the mean of ``I / r - 1`` at each signed chessboard distance
  ``-EDGE_PX..EDGE_PX`` from the void boundary (0 = the void's outermost pixels, negative
  deeper inside, positive outside), ``r`` the void's ring mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from vision.metrics import SIZE_BIN_NAMES, size_bin_index

RING_PX = 2  # ring width outside a void for its local background, pixels
EDGE_PX = 4  # edge profile half-width, pixels
NPS_SIGMA_PX = 2.0  # Gaussian that removes structure before the noise power spectrum
NPS_BINS = 12  # radial frequency bins from 0 to Nyquist
_STRUCT = np.zeros((3, 3, 3), dtype=bool)
_STRUCT[1] = True  # 8-connectivity within an image


@dataclass
class SetStats:
    """Aggregates of one image set (no image, no per-image row)."""

    n_images: int
    void_area: np.ndarray  # (V,) pixels per void
    void_contrast: np.ndarray  # (V,) Michelson contrast per void
    void_bin: np.ndarray  # (V,) size-bin index (vision.metrics.SIZE_BINS)
    edge_profile: np.ndarray  # (n_bins, 2*EDGE_PX+1) mean I/r - 1 per size bin and signed distance
    nps: np.ndarray  # (NPS_BINS,) mean radial noise power spectrum
    features: np.ndarray  # (N, F) simple per-image features for MMD (never reported)
    intensity_hist: np.ndarray  # (HIST_BINS,) density of pixel values in [0, 1]


HIST_BINS = 32


def _radial_matrix(h: int, w: int) -> np.ndarray:
    """(h * (w//2+1), NPS_BINS) averaging matrix from rfft2 cells to radial frequency bins."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    radius = np.sqrt(fy**2 + fx**2).ravel() / 0.5  # 1.0 = Nyquist
    index = np.minimum((radius * NPS_BINS).astype(int), NPS_BINS - 1)
    onehot = np.zeros((radius.size, NPS_BINS))
    onehot[np.arange(radius.size), index] = 1.0
    return onehot / np.maximum(onehot.sum(axis=0), 1.0)


def noise_spectra(images: np.ndarray) -> np.ndarray:
    """(N, NPS_BINS) radial noise power spectra of the structure-removed residuals."""
    n, h, w = images.shape
    residual = images - ndimage.gaussian_filter(images, sigma=(0, NPS_SIGMA_PX, NPS_SIGMA_PX))
    power = np.abs(np.fft.rfft2(residual.astype(np.float32))) ** 2 / (h * w)
    out: np.ndarray = power.reshape(n, -1) @ _radial_matrix(h, w)
    return out


def _signed_distance(inside: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chessboard distance to the void boundary (-EDGE_PX..0 inside, 1..EDGE_PX outside, 0 far
    outside) and the owning void of every pixel within EDGE_PX, by repeated 3x3 erosions and
    label dilations inside each image (much faster than a Euclidean transform on a stack)."""
    footprint = np.ones((1, 3, 3), dtype=bool)
    depth = inside.astype(np.int64)
    core = inside
    for _ in range(EDGE_PX):
        core = ndimage.binary_erosion(core, structure=footprint)
        depth += core
    owner = labels.copy()
    outside = np.zeros(inside.shape, dtype=np.int64)
    for k in range(1, EDGE_PX + 1):
        grown = ndimage.grey_dilation(owner, footprint=footprint)
        new = (owner == 0) & (grown > 0)
        owner[new] = grown[new]
        outside[new] = k
    return np.where(inside, 1 - depth, outside), owner


def _voids(images: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(area, contrast, size bin) per void and the (n_bins, profile) edge-profile matrix."""
    inside = masks > 0
    labels, count = ndimage.label(inside, structure=_STRUCT)
    profile = np.zeros((len(SIZE_BIN_NAMES), 2 * EDGE_PX + 1))
    if count == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, np.int64), profile
    area = np.bincount(labels.ravel(), minlength=count + 1)[1:].astype(np.float64)
    signed, owner = _signed_distance(inside, labels)
    near = inside | (signed > 0)
    vals = images.astype(np.float64)
    v_mean = np.bincount(labels.ravel(), weights=vals.ravel(), minlength=count + 1)[1:] / np.maximum(area, 1)
    ring = near & ~inside & (signed <= RING_PX)
    ring_n = np.bincount(owner[ring], minlength=count + 1)[1:]
    r_mean = np.bincount(owner[ring], weights=vals[ring], minlength=count + 1)[1:] / np.maximum(ring_n, 1)
    contrast = np.abs(v_mean - r_mean) / np.maximum(v_mean + r_mean, 1e-9)
    bins = size_bin_index(area)
    ok = ring_n > 0
    own, dist, val = owner[near], signed[near].astype(np.int64) + EDGE_PX, vals[near]
    keep = ok[own - 1]
    rel = val[keep] / np.maximum(r_mean[own[keep] - 1], 1e-9) - 1.0
    cell = bins[own[keep] - 1] * (2 * EDGE_PX + 1) + dist[keep]
    size = len(SIZE_BIN_NAMES) * (2 * EDGE_PX + 1)
    sums = np.bincount(cell, weights=rel, minlength=size)
    hits = np.bincount(cell, minlength=size)
    profile = (sums / np.maximum(hits, 1)).reshape(len(SIZE_BIN_NAMES), -1)
    profile[(hits == 0).reshape(profile.shape)] = np.nan
    return area[ok], contrast[ok], bins[ok], profile


def _features(images: np.ndarray, masks: np.ndarray, nps: np.ndarray) -> np.ndarray:
    """(N, F) simple features: mean, std, gradient energy, void fraction, log NPS in 4 bands."""
    gy, gx = np.gradient(images, axis=(1, 2))
    grad = np.sqrt(gy**2 + gx**2).mean(axis=(1, 2))
    bands = np.log(np.stack([b.mean(axis=1) for b in np.array_split(nps, 4, axis=1)], axis=1) + 1e-12)
    cols = [images.mean(axis=(1, 2)), images.std(axis=(1, 2)), grad, (masks > 0).mean(axis=(1, 2))]
    return np.column_stack([*cols, bands]).astype(np.float64)


def set_stats(images: np.ndarray, masks: np.ndarray) -> SetStats:
    """All realism aggregates of one set of (N, H, W) images in [0, 1] and their masks."""
    images = np.asarray(images, dtype=np.float32)
    nps = noise_spectra(images)
    area, contrast, bins, profile = _voids(images, np.asarray(masks))
    hist, _ = np.histogram(images, bins=HIST_BINS, range=(0.0, 1.0), density=True)
    return SetStats(
        n_images=int(images.shape[0]),
        void_area=area,
        void_contrast=contrast,
        void_bin=bins,
        edge_profile=profile,
        nps=nps.mean(axis=0),
        features=_features(images, masks, nps),
        intensity_hist=hist,
    )
