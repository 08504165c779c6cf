"""numba kernels for the pixel work: part thickness maps and the fused exposure pass.

They compute what ``synthetic._parts.thickness_numpy`` and ``synthetic._physics.expose_numpy``
compute (tests compare them), in one pass over the pixels instead of a dozen numpy temporaries.
Compiled code is cached on disk (``cache=True``), so only the first run on a machine pays the
compile. Noise uses numba's own generator, seeded per image from the image's numpy stream, so
a set stays independent of the number of worker processes.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from synthetic._parts import EDGE_RAMP, HARMONICS, PartSpec


@njit(cache=True, fastmath=False)
def _part_kernel(kind: int, shape: np.ndarray, t0: float, gy: float, gx: float, ribs: np.ndarray,
                 size: int, ramp: float, harmonics: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    thickness = np.empty((size, size))
    level = np.empty((size, size))
    cy, cx, theta = shape[0], shape[1], shape[2]
    ct, st = math.cos(theta), math.sin(theta)
    half = size / 2.0
    for i in range(size):
        for j in range(size):
            dy, dx = i - cy, j - cx
            u = dx * ct + dy * st
            v = -dx * st + dy * ct
            if kind == 0:
                n = shape[5]
                lv = (abs(u / shape[3]) ** n + abs(v / shape[4]) ** n) ** (1.0 / n)
            else:
                phi = math.atan2(v, u)
                radius = 1.0
                for k in range(harmonics):
                    radius += shape[4 + k] * math.cos((k + 2) * phi + shape[4 + harmonics + k])
                lv = math.hypot(u, v) / (shape[3] * radius)
            inside = min(max((1.0 - lv) / ramp, 0.0), 1.0)
            t = t0 * inside * (1.0 + gy * (i - half) + gx * (j - half))
            for r in range(ribs.shape[0]):
                ur = (j - ribs[r, 1]) * math.cos(ribs[r, 2]) + (i - ribs[r, 0]) * math.sin(ribs[r, 2])
                d = abs(ur) / ribs[r, 3]
                if d < 1.0:
                    t += ribs[r, 4] * t0 * (1.0 - d * d) * inside
            thickness[i, j] = t
            level[i, j] = lv
    return thickness, level


def part_thickness(spec: PartSpec, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(thickness before cores, contour level), as ``thickness_numpy`` computes them."""
    result: tuple[np.ndarray, np.ndarray] = _part_kernel(
        spec.kind, spec.shape, spec.t0, float(spec.gradient[0]), float(spec.gradient[1]), spec.ribs,
        size, EDGE_RAMP, HARMONICS)
    return result


@njit(cache=True)
def _blur(image: np.ndarray, sigma: float) -> np.ndarray:  # pragma: no cover
    """Separable Gaussian, truncated at 3 sigma, 'nearest' edges (as scipy's gaussian_filter)."""
    radius = int(3.0 * sigma + 0.5)
    weights = np.empty(2 * radius + 1)
    for k in range(-radius, radius + 1):
        weights[k + radius] = math.exp(-0.5 * k * k / (sigma * sigma))
    weights /= weights.sum()
    h, w = image.shape
    rows = np.empty((h, w))
    for i in range(h):
        for j in range(w):
            acc = 0.0
            for k in range(-radius, radius + 1):
                acc += weights[k + radius] * image[min(max(i + k, 0), h - 1), j]
            rows[i, j] = acc
    out = np.empty((h, w))
    for i in range(h):
        for j in range(w):
            acc = 0.0
            for k in range(-radius, radius + 1):
                acc += weights[k + radius] * rows[i, min(max(j + k, 0), w - 1)]
            out[i, j] = acc
    return out


@njit(cache=True)
def _expose_kernel(t_eff: np.ndarray, field: np.ndarray, mu: float, bh: float, scatter: float, sigma: float,
                   dose: float, gain: float, offset: float, read_noise: float, seed: int, noise: bool,
                   gauss_min: float, full_scale: float) -> np.ndarray:  # pragma: no cover
    np.random.seed(seed)
    h, w = t_eff.shape
    trans = np.empty((h, w))
    for i in range(h):
        for j in range(w):
            t = t_eff[i, j]
            trans[i, j] = field[i, j] * (math.exp(-mu * t / (1.0 + bh * t)) + scatter)
    if sigma > 0:
        trans = _blur(trans, sigma)
    out = np.empty((h, w), dtype=np.float32)
    scale = 1.0 / (full_scale * dose)
    for i in range(h):
        for j in range(w):
            lam = dose * trans[i, j]
            counts = lam
            reading_noise = 0.0
            if noise:
                if lam >= gauss_min:
                    counts = lam + math.sqrt(lam) * np.random.standard_normal()
                else:
                    counts = float(np.random.poisson(lam))
                reading_noise = read_noise * np.random.standard_normal()
            value = (gain * counts + offset * dose + reading_noise) * scale
            out[i, j] = min(max(value, 0.0), 1.0)
    return out


def expose_kernel(t_eff: np.ndarray, field: np.ndarray, acq: dict[str, float], seed: int, noise: bool,
                  gauss_min: float, full_scale: float) -> np.ndarray:
    image: np.ndarray = _expose_kernel(
        t_eff, field, acq["mu"], acq["beam_hardening"], acq["scatter"], acq["blur"], acq["dose"], acq["gain"],
        acq["offset"], acq["read_noise"], seed, noise, gauss_min, full_scale)
    return image


def warm_up() -> None:
    """Load (or compile once) every kernel; call before forking workers."""
    spec = PartSpec(0, np.array([8.0, 8.0, 0.1, 6.0, 5.0, 2.0]), 5.0, np.zeros(2), np.zeros((1, 5)) + 1.0)
    part_thickness(spec, 16)
    acq = {"mu": 0.1, "beam_hardening": 0.0, "scatter": 0.0, "blur": 1.0, "dose": 100.0, "gain": 1.0,
           "offset": 0.0, "read_noise": 1.0}
    expose_kernel(np.ones((16, 16)), np.ones((16, 16)), acq, 0, True, 30.0, 1.3)
