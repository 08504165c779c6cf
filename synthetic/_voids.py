"""Voids: gas pores, shrinkage cavities and pore clusters, with exact masks.

A void is a union of ellipsoids inside the wall. Seen along the beam, an ellipsoid with
in-plane semi-axes (a, b) and depth d shortens the path through metal by
``L = d * sqrt(1 - r^2)`` where ``r`` is the rotated, normalised in-plane radius. A mask pixel
is set exactly where ``L > 0`` at the pixel centre (no visibility threshold). Voids keep a
one-pixel gap from each other, so each void is its own set of pixels and per-void areas add up
to the mask's area. Each ellipsoid is rendered only inside its bounding box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from synthetic.params import MAX_DEPTH_FRACTION, GenParams
from synthetic.splits import DefectRow

PLACEMENT_TRIES = 25  # attempts to place one void before giving up on it
MIN_WALL_MM = 1.0  # a void is placed only where the wall is at least this thick


@dataclass
class Ellipse:
    cy: float
    cx: float
    a: float  # semi-axis along the angle, pixels
    b: float  # semi-axis across it, pixels
    angle: float


def attenuation(t: np.ndarray | float, mu: float, bh: float) -> Any:
    """Line integral with a beam-hardening approximation: A(t) = mu t / (1 + bh t)."""
    return mu * t / (1.0 + bh * t)


def inverse_attenuation(value: float, mu: float, bh: float) -> float:
    return value / (mu - bh * value)


def depth_for_contrast(contrast: float, t: float, params: GenParams) -> float:
    """Void depth (mm) giving this Michelson contrast in a wall of thickness t (may exceed t)."""
    drop = 2.0 * math.atanh(contrast)
    remaining = float(attenuation(t, params.mu, params.beam_hardening)) - drop
    if remaining <= 0:
        return t
    return t - inverse_attenuation(remaining, params.mu, params.beam_hardening)


def contrast_of(depth: float, t: float, params: GenParams) -> float:
    a_wall = float(attenuation(t, params.mu, params.beam_hardening))
    a_void = float(attenuation(max(t - depth, 0.0), params.mu, params.beam_hardening))
    return math.tanh((a_wall - a_void) / 2.0)


def _bbox(e: Ellipse, size: int) -> tuple[int, int, int, int]:
    ca, sa = math.cos(e.angle), math.sin(e.angle)
    hy = math.hypot(e.a * sa, e.b * ca)
    hx = math.hypot(e.a * ca, e.b * sa)
    y0, x0 = max(0, math.ceil(e.cy - hy)), max(0, math.ceil(e.cx - hx))
    y1, x1 = min(size, math.floor(e.cy + hy) + 1), min(size, math.floor(e.cx + hx) + 1)
    return y0, x0, y1, x1


def _unit_radius(e: Ellipse, box: tuple[int, int, int, int]) -> np.ndarray:
    """r^2 of every pixel centre in the box, in the ellipse's normalised frame."""
    y0, x0, y1, x1 = box
    dy = np.arange(y0, y1, dtype=np.float64)[:, None] - e.cy
    dx = np.arange(x0, x1, dtype=np.float64)[None, :] - e.cx
    ca, sa = math.cos(e.angle), math.sin(e.angle)
    u = (dx * ca + dy * sa) / e.a
    v = (-dx * sa + dy * ca) / e.b
    out: np.ndarray = u * u + v * v
    return out


def _union_box(ellipses: list[Ellipse], size: int) -> tuple[int, int, int, int] | None:
    boxes = [_bbox(e, size) for e in ellipses]
    y0, x0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
    y1, x1 = max(b[2] for b in boxes), max(b[3] for b in boxes)
    return (y0, x0, y1, x1) if y1 > y0 and x1 > x0 else None


def render_path(
    ellipses: list[Ellipse], depth: float, size: int
) -> tuple[tuple[int, int, int, int], np.ndarray] | None:
    """(bbox, path length over the bbox) of a union of ellipsoids; None if no pixel is inside."""
    box = _union_box(ellipses, size)
    if box is None:
        return None
    y0, x0, y1, x1 = box
    path = np.zeros((y1 - y0, x1 - x0))
    for e in ellipses:
        r2 = _unit_radius(e, box)
        np.maximum(path, depth * np.sqrt(np.clip(1.0 - r2, 0.0, None)), out=path)
    rows, cols = np.nonzero(path > 0)
    if len(rows) == 0:
        return None
    tight = (y0 + int(rows.min()), x0 + int(cols.min()), y0 + int(rows.max()) + 1, x0 + int(cols.max()) + 1)
    sub = path[tight[0] - y0 : tight[2] - y0, tight[1] - x0 : tight[3] - x0]
    return tight, sub


def _pore(cy: float, cx: float, diameter: float, rng: np.random.Generator) -> list[Ellipse]:
    a = diameter / 2.0
    return [Ellipse(cy, cx, a, a * rng.uniform(0.6, 1.0), rng.uniform(0, math.pi))]


def _shrinkage(cy: float, cx: float, extent: float, rng: np.random.Generator) -> list[Ellipse]:
    """A thin, branching chain of elongated ellipsoids."""
    ends = [(cy, cx)]
    direction = rng.uniform(0, 2 * math.pi)
    parts = []
    for _ in range(int(rng.integers(3, 7))):
        sy, sx = ends[int(rng.integers(len(ends)))] if rng.random() < 0.3 else ends[-1]
        direction += rng.normal(0.0, 0.7)
        length = extent * rng.uniform(0.3, 0.6)
        ey, ex = sy + length * math.sin(direction), sx + length * math.cos(direction)
        parts.append(
            Ellipse((sy + ey) / 2, (sx + ex) / 2, length / 2 + 0.6, rng.uniform(0.6, 1.1), direction)
        )
        ends.append((ey, ex))
    return parts


class VoidPlacer:
    """Places voids in one image's wall without overlap and renders them."""

    def __init__(
        self, thickness: np.ndarray, params: GenParams, rng: np.random.Generator, engine: str = "numpy"
    ):
        self.engine = engine
        self.thickness = thickness
        self.size = thickness.shape[0]
        self.params = params
        self.rng = rng
        self.path = np.zeros_like(thickness)
        self.mask = np.zeros(thickness.shape, dtype=np.uint8)
        self.rows: list[DefectRow] = []
        self.row_walls: list[float] = []  # each row's wall thickness (mm, as recorded), for its noise
        self._walls = np.flatnonzero(thickness >= MIN_WALL_MM * 2)  # row-major pixel indices

    def _free(self, box: tuple[int, int, int, int]) -> bool:
        y0, x0, y1, x1 = box
        return not self.mask[max(0, y0 - 1) : y1 + 1, max(0, x0 - 1) : x1 + 1].any()

    def _centre(self) -> tuple[float, float] | None:
        if len(self._walls) == 0:
            return None
        y, x = divmod(int(self._walls[int(self.rng.integers(len(self._walls)))]), self.size)
        return y + self.rng.uniform(-0.5, 0.5), x + self.rng.uniform(-0.5, 0.5)

    def place(self, shape: str, ellipses: list[Ellipse], contrast: float) -> bool:
        """Render one void if it fits in the wall and keeps clear of others."""
        if self.engine != "fast":
            return self.place_numpy(shape, ellipses, contrast)
        from synthetic._kernels import place_kernel  # deferred: numba, for the fast engine only

        p = self.params
        table = np.array([[e.cy, e.cx, e.a, e.b, e.angle] for e in ellipses])
        ok, y0, x0, y1, x1, area, depth, t_local = place_kernel(
            table,
            self.thickness,
            self.mask,
            self.path,
            contrast,
            p.mu,
            p.beam_hardening,
            MAX_DEPTH_FRACTION,
            MIN_WALL_MM,
        )
        if ok:
            self._record(shape, (y0, x0, y1, x1), area, depth, t_local)
        return bool(ok)

    def _record(
        self, shape: str, box: tuple[int, int, int, int], area: int, depth: float, t_local: float
    ) -> None:
        y0, x0, y1, x1 = box
        wall = round(t_local, 4)
        self.rows.append(
            {
                "area": area,
                "diameter": round(2.0 * math.sqrt(area / math.pi), 4),
                "contrast": round(contrast_of(depth, t_local, self.params), 6),
                "depth": round(depth, 4),
                "thickness": wall,
                "shape": shape,
                "bbox": [y0, x0, y1, x1],
                "edge": y0 == 0 or x0 == 0 or y1 == self.size or x1 == self.size,
            }
        )
        self.row_walls.append(wall)

    def place_numpy(self, shape: str, ellipses: list[Ellipse], contrast: float) -> bool:
        """The numpy reference of ``place`` (the fast engine runs synthetic._kernels.place_kernel)."""
        rendered = render_path(ellipses, 1.0, self.size)
        if rendered is None or not self._free(rendered[0]):
            return False
        box, unit = rendered
        y0, x0, y1, x1 = box
        inside = unit > 0
        wall = self.thickness[y0:y1, x0:x1][inside]
        if wall.min() < MIN_WALL_MM:
            return False
        iy, ix = np.unravel_index(int(np.argmax(unit)), unit.shape)
        t_local = float(self.thickness[y0 + iy, x0 + ix])  # wall at the void's deepest point
        depth = min(
            depth_for_contrast(contrast, t_local, self.params), MAX_DEPTH_FRACTION * float(wall.min())
        )
        self.path[y0:y1, x0:x1] = np.maximum(self.path[y0:y1, x0:x1], depth * unit)
        self.mask[y0:y1, x0:x1] |= inside.astype(np.uint8)
        self._record(shape, box, int(inside.sum()), depth, t_local)
        return True

    def _try(self, shape: str, build: Any, contrast: float) -> bool:
        for _ in range(PLACEMENT_TRIES):
            centre = self._centre()
            if centre is None:
                return False
            if self.place(shape, build(*centre), contrast):
                return True
        return False

    def add_random_void(self) -> None:
        p, rng = self.params, self.rng
        contrast = float(rng.uniform(p.contrast_min, p.contrast_max))
        roll = rng.random()
        if roll < p.shrinkage_prob:
            extent = rng.uniform(p.diameter_min, p.diameter_max) * 1.5
            self._try("shrinkage", lambda cy, cx: _shrinkage(cy, cx, extent, rng), contrast * 0.7)
        elif roll < p.shrinkage_prob + p.cluster_prob:
            self._add_cluster(contrast)
        else:
            diameter = rng.uniform(p.diameter_min, p.diameter_max)
            self._try("pore", lambda cy, cx: _pore(cy, cx, diameter, rng), contrast)

    def _add_cluster(self, contrast: float) -> None:
        p, rng = self.params, self.rng
        centre = self._centre()
        if centre is None:
            return
        small = max(p.diameter_min, p.diameter_max / 3)
        spread = 2.5 * small
        for _ in range(int(rng.integers(3, 8))):
            diameter = rng.uniform(p.diameter_min, small)
            for _ in range(PLACEMENT_TRIES // 3):
                cy, cx = centre[0] + rng.normal(0, spread), centre[1] + rng.normal(0, spread)
                if (
                    0 <= cy < self.size
                    and 0 <= cx < self.size
                    and self.place("cluster", _pore(cy, cx, diameter, rng), contrast * rng.uniform(0.8, 1.0))
                ):
                    break
