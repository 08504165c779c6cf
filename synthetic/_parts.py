"""Cast parts: a wall-thickness map (mm) per image, from procedural contours or silhouettes.

A part is an outer contour (a rotated superellipse or a smooth star-shaped polygon) with a
filleted edge ramp, a linear wall-thickness gradient, ribs (raised bands) and cores (through
holes, thickness 0). The random draws make a ``PartSpec`` (scalars only); ``thickness_numpy``
then evaluates the pixels, and cores are cut inside their bounding boxes only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TypedDict

import numpy as np

from synthetic.params import GenParams

EDGE_RAMP = 0.10  # fraction of the part radius over which the wall rises from 0 to nominal
MAX_RIBS = 2  # raised bands per part
MAX_CORES = 2  # through holes per part
CORE_CHAMFER = 0.15  # a core's wall rises over this fraction of its radius
HARMONICS = 4  # polygon radius harmonics k = 2 .. HARMONICS + 1


class PartMeta(TypedDict):
    """What ``images.jsonl`` records about an image's part."""

    part: str  # superellipse, polygon or fashion-mnist
    thickness_nominal: float  # mm
    ribs: int
    cores: int


@dataclass
class Part:
    thickness: np.ndarray  # (S, S) float64, mm; 0 outside the part and inside cores
    meta: PartMeta


@dataclass
class PartSpec:
    """Every random number of a procedural part; the pixels follow deterministically."""

    kind: int  # 0 superellipse, 1 polygon
    shape: np.ndarray  # [cy, cx, theta, a, b, n] or [cy, cx, theta, r0, amp_2..5, phase_2..5]
    t0: float  # nominal wall thickness, mm
    gradient: np.ndarray  # [gy, gx] per pixel
    ribs: np.ndarray  # (k, 5): cy, cx, theta, half width, amplitude (fraction of t0)


@lru_cache(maxsize=8)
def grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates (y, x), each (S, S) float64, read-only."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    yy.flags.writeable = False
    xx.flags.writeable = False
    return yy, xx


def sample_spec(size: int, params: GenParams, rng: np.random.Generator) -> PartSpec:
    kind = 0 if rng.random() < 0.5 else 1
    cy, cx = size / 2 + rng.uniform(-0.12, 0.12, 2) * size
    theta = rng.uniform(0, np.pi)
    if kind == 0:
        a, b = rng.uniform(0.40, 0.75, 2) * size
        shape = np.array([cy, cx, theta, a, b, rng.uniform(2.0, 6.0)])
    else:
        r0 = rng.uniform(0.40, 0.70) * size
        amps = [rng.uniform(0, 0.25 / k) for k in range(2, 2 + HARMONICS)]
        phases = [rng.uniform(0, 2 * np.pi) for _ in range(HARMONICS)]
        shape = np.array([cy, cx, theta, r0, *amps, *phases])
    t0 = float(rng.uniform(params.thickness_min, params.thickness_max))
    gradient = rng.uniform(-0.35, 0.35, 2) / size
    ribs = []
    for _ in range(int(rng.integers(0, MAX_RIBS + 1))):
        ry, rx = size / 2 + rng.uniform(-0.25, 0.25, 2) * size
        ribs.append([ry, rx, rng.uniform(0, np.pi), rng.uniform(0.03, 0.08) * size, rng.uniform(0.3, 0.8)])
    return PartSpec(kind, shape, t0, gradient, np.array(ribs, dtype=np.float64).reshape(-1, 5))


def _rotate(spec_row: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates relative to (cy, cx), rotated by theta, in float32."""
    yy, xx = grid32(size)
    cy, cx, theta = (np.float32(v) for v in spec_row[:3])
    c, s = np.cos(theta), np.sin(theta)
    dy, dx = yy - cy, xx - cx
    return dx * c + dy * s, dy * c - dx * s


@lru_cache(maxsize=8)
def grid32(size: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = grid(size)
    y32, x32 = yy.astype(np.float32), xx.astype(np.float32)
    y32.flags.writeable = False
    x32.flags.writeable = False
    return y32, x32


def level_numpy(spec: PartSpec, size: int) -> np.ndarray:
    """Normalised radius of the contour: < 1 inside the part (float32)."""
    u, v = _rotate(spec.shape, size)
    if spec.kind == 0:
        a, b, n = (np.float32(x) for x in spec.shape[3:6])
        out: np.ndarray = (np.abs(u / a) ** n + np.abs(v / b) ** n) ** (np.float32(1) / n)
        return out
    r0, amps, phases = spec.shape[3], spec.shape[4 : 4 + HARMONICS], spec.shape[4 + HARMONICS :]
    r = np.sqrt(u * u + v * v)  # not np.hypot: 10x slower here
    rr = np.maximum(r, np.float32(1e-6))
    c1, s1 = u / rr, v / rr  # cos and sin of the polar angle: no arctan2, no cos per pixel
    ck, sk = c1 * c1 - s1 * s1, s1 * c1 + c1 * s1  # angle k * phi by the product recurrence, k = 2 ..
    radius = np.ones_like(u)
    for k in range(HARMONICS):
        cp, sp = np.float32(np.cos(phases[k])), np.float32(np.sin(phases[k]))
        radius += np.float32(amps[k]) * (ck * cp - sk * sp)
        ck, sk = ck * c1 - sk * s1, sk * c1 + ck * s1
    out = r / (np.float32(r0) * radius)
    return out


def thickness_numpy(spec: PartSpec, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(thickness before cores (float64), contour level (float32)) of a spec."""
    yy, xx = grid32(size)
    f32 = np.float32
    level = level_numpy(spec, size)
    inside = np.clip((f32(1) - level) / f32(EDGE_RAMP), f32(0), f32(1))
    half = f32(size / 2)
    thickness = (
        f32(spec.t0)
        * inside
        * (f32(1) + f32(spec.gradient[0]) * (yy - half) + f32(spec.gradient[1]) * (xx - half))
    )
    for rib in spec.ribs:
        u, _ = _rotate(rib, size)
        d = np.abs(u) / f32(rib[3])
        thickness += f32(rib[4] * spec.t0) * np.maximum(f32(1) - d * d, f32(0)) * inside
    return thickness.astype(np.float64), level


def _frame(spec_row: np.ndarray) -> list[np.float32]:
    """[cy, cx, cos theta, sin theta] in float32, computed as ``_rotate`` does."""
    cy, cx, theta = (np.float32(v) for v in spec_row[:3])
    return [cy, cx, np.cos(theta), np.sin(theta)]


def thickness_fast(spec: PartSpec, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``thickness_numpy`` in compiled single passes (synthetic._kernels); the same bits."""
    from synthetic._kernels import part_thickness, polygon_level  # deferred: numba, for the fast engine only

    f32 = np.float32
    if spec.kind == 0:
        level = level_numpy(spec, size)
    else:
        phases = spec.shape[4 + HARMONICS :]
        level = polygon_level(
            size,
            np.array(_frame(spec.shape), f32),
            f32(spec.shape[3]),
            spec.shape[4 : 4 + HARMONICS].astype(f32),
            np.cos(phases).astype(f32),
            np.sin(phases).astype(f32),
        )
    ribs = np.array([[*_frame(rib), rib[3], rib[4] * spec.t0] for rib in spec.ribs], f32).reshape(-1, 6)
    thickness = part_thickness(level, f32(spec.t0), spec.gradient.astype(f32), f32(EDGE_RAMP), ribs)
    return thickness, level


def cut_cores(thickness: np.ndarray, level: np.ndarray, rng: np.random.Generator) -> int:
    """Drill 0..MAX_CORES through holes well inside the part, each only inside its box."""
    size = thickness.shape[0]
    n_cores = int(rng.integers(0, MAX_CORES + 1))
    inner = np.flatnonzero(level.ravel() < 0.6)
    if len(inner) == 0:
        return 0
    for _ in range(n_cores):
        cy, cx = divmod(int(inner[rng.integers(len(inner))]), size)
        r = rng.uniform(0.04, 0.12) * size
        reach = int(np.ceil(r * (1 + CORE_CHAMFER))) + 1
        y0, y1, x0, x1 = (
            max(0, cy - reach),
            min(size, cy + reach + 1),
            max(0, cx - reach),
            min(size, cx + reach + 1),
        )
        dy = np.arange(y0, y1, dtype=np.float64)[:, None] - cy
        dx = np.arange(x0, x1, dtype=np.float64)[None, :] - cx
        thickness[y0:y1, x0:x1] *= np.clip((np.sqrt(dy * dy + dx * dx) / r - 1.0) / CORE_CHAMFER, 0.0, 1.0)
    return n_cores


def procedural_part(size: int, params: GenParams, rng: np.random.Generator, engine: str = "numpy") -> Part:
    """A random cast part filling most of the image (``engine`` "fast": compiled, same result)."""
    spec = sample_spec(size, params, rng)
    thickness, level = (thickness_fast if engine == "fast" else thickness_numpy)(spec, size)
    cores = cut_cores(thickness, level, rng)
    np.maximum(thickness, 0.0, out=thickness)
    kind = "superellipse" if spec.kind == 0 else "polygon"
    return Part(
        thickness,
        {"part": kind, "thickness_nominal": round(spec.t0, 4), "ribs": len(spec.ribs), "cores": cores},
    )


def silhouette_part(silhouettes: np.ndarray, size: int, params: GenParams, rng: np.random.Generator) -> Part:
    """A part whose outline and thickness follow a Fashion-MNIST silhouette (uint8, 28x28)."""
    from scipy.ndimage import map_coordinates

    src = silhouettes[int(rng.integers(len(silhouettes)))].astype(np.float64) / 255.0
    yy, xx = grid(size)
    scale = src.shape[0] / (size * rng.uniform(0.8, 1.0))
    shift = rng.uniform(-0.05, 0.05, 2) * size
    coords = [
        (yy - size / 2 - shift[0]) * scale + src.shape[0] / 2 - 0.5,
        (xx - size / 2 - shift[1]) * scale + src.shape[1] / 2 - 0.5,
    ]
    value = map_coordinates(src, coords, order=1, mode="constant", cval=0.0)
    t0 = float(rng.uniform(params.thickness_min, params.thickness_max))
    inside = np.clip((value - 0.05) / 0.15, 0.0, 1.0)
    thickness = t0 * inside * (0.4 + 0.6 * value)
    return Part(
        thickness, {"part": "fashion-mnist", "thickness_nominal": round(t0, 4), "ribs": 0, "cores": 0}
    )
