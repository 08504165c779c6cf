"""numba kernels of the "fast" engine: part maps, void placement and the exposure pass.

``polygon_level`` and ``part_thickness`` repeat ``synthetic._parts``'s numpy float32 steps in
one pass per pixel, in the same order, so both engines draw bit-identical parts (tested).

Placing a void is many tiny array operations (a bounding box, a handful of pixels, a few
checks); in numpy its cost is interpreter overhead. ``place_kernel`` does the same steps as
``synthetic._voids.VoidPlacer.place_numpy`` in one compiled call, pixel for pixel the same
(tests compare them). Compiled code is cached on disk (``cache=True``): only the first run on a
machine pays the compile (a few seconds).

``expose_kernel`` fuses the exposure after the attenuation (open-beam field, scatter, the
separable Gaussian PSF, photon and read noise, normalisation, clipping) into one pass. Its
normal deviates come from an inverse-CDF table (``NORMAL_TABLE_BITS``) indexed by raw 32-bit
draws, several times cheaper per pixel than numpy's normal sampler; the
exponentials stay in numpy, whose SIMD ``exp`` beats scalar compiled code (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np


def _ensure_cache_dir() -> None:
    """numba caches next to this file; where that folder is read-only (a sandbox mount), use a
    per-user temporary folder instead of failing at import."""
    if os.access(Path(__file__).parent, os.W_OK) or "NUMBA_CACHE_DIR" in os.environ:
        return
    os.environ["NUMBA_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"segfactory-numba-{os.getuid()}")
    if "numba" in sys.modules:
        from numba.core import config

        config.reload_config()


_ensure_cache_dir()

from numba import njit  # noqa: E402


@njit(cache=True)
def _depth_for_contrast(contrast: float, t: float, mu: float, bh: float) -> float:  # pragma: no cover
    drop = 2.0 * math.atanh(contrast)
    remaining = mu * t / (1.0 + bh * t) - drop
    if remaining <= 0:
        return t
    return t - remaining / (mu - bh * remaining)


@njit(cache=True)
def _union_box(ellipses: np.ndarray, size: int) -> tuple[int, int, int, int]:  # pragma: no cover
    y0, x0, y1, x1 = size, size, 0, 0
    for k in range(ellipses.shape[0]):
        cy, cx, a, b, angle = ellipses[k, 0], ellipses[k, 1], ellipses[k, 2], ellipses[k, 3], ellipses[k, 4]
        ca, sa = math.cos(angle), math.sin(angle)
        hy, hx = math.hypot(a * sa, b * ca), math.hypot(a * ca, b * sa)
        y0 = min(y0, max(0, math.ceil(cy - hy)))
        x0 = min(x0, max(0, math.ceil(cx - hx)))
        y1 = max(y1, min(size, math.floor(cy + hy) + 1))
        x1 = max(x1, min(size, math.floor(cx + hx) + 1))
    return y0, x0, y1, x1


@njit(cache=True)
def _unit_path(ellipses: np.ndarray, y0: int, x0: int, y1: int, x1: int) -> np.ndarray:  # pragma: no cover
    unit = np.zeros((y1 - y0, x1 - x0))
    for k in range(ellipses.shape[0]):
        cy, cx, a, b, angle = ellipses[k, 0], ellipses[k, 1], ellipses[k, 2], ellipses[k, 3], ellipses[k, 4]
        ca, sa = math.cos(angle), math.sin(angle)
        for i in range(y0, y1):
            dy = i - cy
            for j in range(x0, x1):
                dx = j - cx
                u = (dx * ca + dy * sa) / a
                v = (-dx * sa + dy * ca) / b
                value = math.sqrt(max(1.0 - (u * u + v * v), 0.0))
                if value > unit[i - y0, j - x0]:
                    unit[i - y0, j - x0] = value
    return unit


@njit(cache=True)
def place_kernel(
    ellipses: np.ndarray,
    thickness: np.ndarray,
    mask: np.ndarray,
    path: np.ndarray,
    contrast: float,
    mu: float,
    bh: float,
    max_depth_fraction: float,
    min_wall: float,
) -> tuple[bool, int, int, int, int, int, float, float]:  # pragma: no cover
    """Render a union of ellipsoids into ``path``/``mask`` if it fits; returns
    (placed, y0, x0, y1, x1, area, depth, wall thickness at the deepest point)."""
    size = thickness.shape[0]
    by0, bx0, by1, bx1 = _union_box(ellipses, size)
    if by1 <= by0 or bx1 <= bx0:
        return False, 0, 0, 0, 0, 0, 0.0, 0.0
    unit = _unit_path(ellipses, by0, bx0, by1, bx1)
    y0, x0, y1, x1 = size, size, -1, -1
    for i in range(unit.shape[0]):
        for j in range(unit.shape[1]):
            if unit[i, j] > 0:
                y0, x0 = min(y0, by0 + i), min(x0, bx0 + j)
                y1, x1 = max(y1, by0 + i + 1), max(x1, bx0 + j + 1)
    if y1 < 0:
        return False, 0, 0, 0, 0, 0, 0.0, 0.0
    for i in range(max(0, y0 - 1), min(size, y1 + 1)):
        for j in range(max(0, x0 - 1), min(size, x1 + 1)):
            if mask[i, j]:
                return False, 0, 0, 0, 0, 0, 0.0, 0.0
    wall, best, t_local, area = np.inf, -1.0, 0.0, 0
    for i in range(y0, y1):
        for j in range(x0, x1):
            value = unit[i - by0, j - bx0]
            if value > 0:
                area += 1
                wall = min(wall, thickness[i, j])
            if value > best:
                best, t_local = value, thickness[i, j]
    if wall < min_wall:
        return False, 0, 0, 0, 0, 0, 0.0, 0.0
    depth = min(_depth_for_contrast(contrast, t_local, mu, bh), max_depth_fraction * wall)
    for i in range(y0, y1):
        for j in range(x0, x1):
            value = unit[i - by0, j - bx0]
            if value > 0:
                path[i, j] = max(path[i, j], depth * value)
                mask[i, j] = 1
    return True, y0, x0, y1, x1, area, depth, t_local


@njit(cache=True)
def polygon_level(
    size: int, frame: np.ndarray, r0: np.float32, amps: np.ndarray, cps: np.ndarray, sps: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """``synthetic._parts.level_numpy`` of a polygon, operation for operation (same float32 bits).

    ``frame`` = [cy, cx, cos theta, sin theta]; ``cps``/``sps`` the harmonics' phase cos/sin.
    Works a row at a time, each step a loop over the row (the compiler vectorises those).
    """
    level = np.empty((size, size), np.float32)
    cy, cx, c, s = frame[0], frame[1], frame[2], frame[3]
    one, tiny = np.float32(1.0), np.float32(1e-6)
    rows = np.empty((6, size), np.float32)
    r, c1, s1, ck, sk, radius = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
    for i in range(size):
        dy = np.float32(i) - cy
        for j in range(size):
            dx = np.float32(j) - cx
            u, v = dx * c + dy * s, dy * c - dx * s
            r[j] = np.float32(math.sqrt(u * u + v * v))
            rr = max(r[j], tiny)
            c1[j], s1[j] = u / rr, v / rr
            ck[j], sk[j] = c1[j] * c1[j] - s1[j] * s1[j], s1[j] * c1[j] + c1[j] * s1[j]
            radius[j] = one
        for k in range(amps.shape[0]):
            amp, cp, sp = amps[k], cps[k], sps[k]
            for j in range(size):
                radius[j] = radius[j] + amp * (ck[j] * cp - sk[j] * sp)
                ck[j], sk[j] = ck[j] * c1[j] - sk[j] * s1[j], sk[j] * c1[j] + ck[j] * s1[j]
        for j in range(size):
            level[i, j] = r[j] / (r0 * radius[j])
    return level


@njit(cache=True)
def part_thickness(
    level: np.ndarray, t0: np.float32, gradient: np.ndarray, ramp: np.float32, ribs: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """``synthetic._parts.thickness_numpy`` after the level, operation for operation (float64 out).

    ``gradient`` = [gy, gx]; ``ribs`` rows = [cy, cx, cos, sin, half width, amplitude * t0].
    """
    size = level.shape[0]
    out = np.empty((size, size), np.float64)
    one, zero, half = np.float32(1.0), np.float32(0.0), np.float32(size / 2)
    inside, t = np.empty(size, np.float32), np.empty(size, np.float32)
    for i in range(size):
        y = np.float32(i)
        row = one + gradient[0] * (y - half)
        for j in range(size):
            inside[j] = min(max((one - level[i, j]) / ramp, zero), one)
            t[j] = t0 * inside[j] * (row + gradient[1] * (np.float32(j) - half))
        for k in range(ribs.shape[0]):
            dy, c, s, width, amp = y - ribs[k, 0], ribs[k, 2], ribs[k, 3], ribs[k, 4], ribs[k, 5]
            for j in range(size):
                d = abs((np.float32(j) - ribs[k, 1]) * c + dy * s) / width
                t[j] = t[j] + amp * max(one - d * d, zero) * inside[j]
        for j in range(size):
            out[i, j] = t[j]
    return out


NORMAL_TABLE_BITS = 16  # inverse-CDF table of 2**16 + 1 quantiles, linearly interpolated; |z| <= 4.42


# Wichura's AS241 for 0.075 <= p <= 0.925 and for the tails up to r = sqrt(-log p) <= 5, as in
# CPython's statistics.NormalDist.inv_cdf: (numerator, denominator) coefficients, Horner order.
_AS241_CENTRAL = (
    (2.5090809287301226727e3, 3.3430575583588128105e4, 6.7265770927008700853e4, 4.5921953931549871457e4,
     1.3731693765509461125e4, 1.9715909503065514427e3, 1.3314166789178437745e2, 3.3871328727963666080e0),
    (5.2264952788528545610e3, 2.8729085735721942674e4, 3.9307895800092710610e4, 2.1213794301586595867e4,
     5.3941960214247511077e3, 6.8718700749205790830e2, 4.2313330701600911252e1, 1.0),
)  # fmt: skip
_AS241_TAIL = (
    (7.7454501427834140764e-4, 2.2723844989269184583e-2, 2.4178072517745061177e-1, 1.2704582524523683826e0,
     3.6478483247632045605e0, 5.7694972214606914055e0, 4.6303378461565452959e0, 1.4234371107496835773e0),
    (1.0507500716444168432e-9, 5.4759380849953449460e-4, 1.5198666563616457197e-2, 1.4810397642748007459e-1,
     6.8976733498510000455e-1, 1.6763848301838038494e0, 2.0531916266377588219e0, 1.0),
)  # fmt: skip


def _horner(coefficients: tuple[float, ...], r: np.ndarray) -> np.ndarray:
    acc = coefficients[0] * r + coefficients[1]
    for c in coefficients[2:]:
        acc = acc * r + c
    return acc


def normal_quantiles(p: np.ndarray) -> np.ndarray:
    """Standard-normal quantiles of ``p`` (float64, 7.6e-6 <= p <= 1 - 7.6e-6), by the same
    arithmetic as ``statistics.NormalDist().inv_cdf``, vectorised: 2 ms for the table, not 60."""
    q = p - 0.5
    central = np.abs(q) <= 0.425
    out = np.empty_like(p)
    r = 0.180625 - q[central] ** 2
    out[central] = _horner(_AS241_CENTRAL[0], r) * q[central] / _horner(_AS241_CENTRAL[1], r)
    tail = np.sqrt(-np.log(np.where(q <= 0.0, p, 1.0 - p)[~central]))
    if np.any(tail > 5.0):
        raise ValueError("p is too close to 0 or 1 for this table's branch of AS241")
    t = tail - 1.6
    x = _horner(_AS241_TAIL[0], t) / _horner(_AS241_TAIL[1], t)
    out[~central] = np.where(q[~central] < 0.0, -x, x)
    return out


@lru_cache(maxsize=1)
def normal_table() -> np.ndarray:
    """(2**NORMAL_TABLE_BITS + 1,) float32 standard-normal quantiles at k / 2**bits, the two ends
    clamped to half a cell (the tails beyond 4.42 sigma, probability 1e-5, are cut), read-only.
    The same float32 values as ``statistics.NormalDist`` gives (tests check every entry)."""
    cells = 1 << NORMAL_TABLE_BITS
    p = np.clip(np.arange(cells + 1, dtype=np.float64) / cells, 0.5 / cells, 1.0 - 0.5 / cells)
    table = normal_quantiles(p).astype(np.float32)
    table.flags.writeable = False
    return table


def gaussian_weights(sigma: float, truncate: float = 3.0) -> np.ndarray:
    """The 1-D kernel scipy.ndimage.gaussian_filter uses for this sigma (float32; [1] when 0)."""
    if sigma <= 0:
        return np.ones(1, np.float32)
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (sigma * sigma) * x * x)
    return (phi / phi.sum()).astype(np.float32)


@njit(cache=True, fastmath=True)
def _blur(src: np.ndarray, weights: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:  # pragma: no cover
    """Separable convolution, axis 0 then axis 1, edge pixels repeated ("nearest"); each tap is
    one contiguous row operation (the compiler vectorises them)."""
    h, w = src.shape
    r = weights.shape[0] // 2
    tmp[:, :] = 0.0
    for i in range(h):
        for k in range(-r, r + 1):
            row, wk = src[min(max(i + k, 0), h - 1)], weights[k + r]
            for j in range(w):
                tmp[i, j] += wk * row[j]
    pad = np.empty(w + 2 * r, np.float32)
    for i in range(h):
        pad[r : r + w] = tmp[i]
        pad[:r] = tmp[i, 0]
        pad[r + w :] = tmp[i, w - 1]
        out[i, :] = 0.0
        for k in range(2 * r + 1):
            wk = weights[k]
            for j in range(w):
                out[i, j] += wk * pad[j + k]


@njit(cache=True)
def _normal(bits: np.uint64, table: np.ndarray) -> np.float32:  # pragma: no cover
    """A standard-normal deviate from 32 random bits: table cell from the top 16, position from the rest."""
    k = np.int64(bits >> np.uint64(16))
    frac = np.float32(bits & np.uint64(0xFFFF)) * np.float32(1.0 / 65536.0)
    return table[k] + frac * (table[k + 1] - table[k])


@njit(cache=True)
def expose_kernel(
    e: np.ndarray,
    field: np.ndarray,
    weights: np.ndarray,
    raw: np.ndarray,
    table: np.ndarray,
    acq: np.ndarray,
    out: np.ndarray,
    lam: np.ndarray,
) -> int:  # pragma: no cover
    """``out`` = the normalised reading of a transmission ``e = exp(-A)`` (float32 (H, W) arrays).

    ``acq`` = [scatter, dose, gain, offset, read noise, normalisation, low-count threshold].
    ``raw`` holds one uint64 per two pixels (empty: no noise). Writes the expected counts into
    ``lam`` and returns how many pixels are below the threshold: the caller redraws those with
    Poisson counts.
    """
    h, w = e.shape
    scatter, dose, gain, offset, read, scale, threshold = (
        acq[0],
        acq[1],
        acq[2],
        acq[3],
        acq[4],
        acq[5],
        acq[6],
    )
    one = np.float32(1.0)
    for i in range(h):
        for j in range(w):
            out[i, j] = np.float32(field[i, j]) * (e[i, j] + scatter)
    _blur(out, weights, out, lam)
    base, read2, noise, low = offset * dose, read * read, raw.shape[0] > 0, 0
    mask32 = np.uint64(0xFFFFFFFF)
    for i in range(h):
        for j in range(w):
            counts = out[i, j] * dose
            lam[i, j] = counts
            reading = gain * counts + base
            if noise:
                p = i * w + j
                z = _normal((raw[p >> 1] >> np.uint64(32 * (p & 1))) & mask32, table)
                reading += math.sqrt(gain * gain * counts + read2) * z
            low += counts < threshold
            out[i, j] = min(max(reading * scale, np.float32(0.0)), one)
    return low


def warm_up() -> None:
    """Load (or compile once) the kernels; call before forking workers."""
    thickness = np.full((16, 16), 10.0)
    place_kernel(
        np.array([[8.0, 8.0, 3.0, 2.0, 0.3]]),
        thickness,
        np.zeros((16, 16), np.uint8),
        np.zeros((16, 16)),
        0.1,
        0.08,
        0.01,
        0.8,
        1.0,
    )
    f32 = np.float32
    frame, harmonics = np.ones(4, f32), np.zeros(4, f32)
    part_thickness(
        polygon_level(16, frame, f32(5.0), harmonics, harmonics, harmonics),
        f32(10.0),
        np.zeros(2, f32),
        f32(0.1),
        np.ones((1, 6), f32),
    )
    out, lam = np.ones((16, 16), np.float32), np.ones((16, 16), np.float32)
    acq = np.array([0.01, 500.0, 1.0, 0.01, 3.0, 1 / 650.0, 30.0], np.float32)
    expose_kernel(
        out.copy(),
        np.ones((16, 16)),
        gaussian_weights(1.0),
        np.zeros(128, np.uint64),
        normal_table(),
        acq,
        out,
        lam,
    )
