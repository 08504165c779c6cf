"""Removing 8-connected components smaller than ``m`` pixels, exactly, with the gate's allowlisted ops.

ONNX has no labelling op, so the graph decides per pixel, from a window of radius R = m - 1:

1. every foreground pixel gets a unique id (``row * MAX_SIDE + col + 1``) and, L = m - 1 times,
   takes the largest id among its 3x3 foreground neighbours (``MaxPool`` then masking). Ids never
   cross between components (pixels of two 8-connected components are never 3x3 neighbours),
   so equal labels mean one component; a component of fewer than m pixels (geodesic diameter at
   most m - 2) has converged to a single label.
2. ``leak(q)``: q has a foreground neighbour with another label (its component's labels have not
   converged around q).
3. for each pixel p, over the window offsets d (|d| <= R, ``Slice`` of a padded copy):
   S(p) = {q in window: label(q) == label(p)}; ``count`` = |S(p)|, ``leak_hit`` = some q in S(p)
   leaks, ``ring_hit`` = some q in S(p) lies on the window's border (distance R).
4. p is small iff it is foreground, count < m, and neither hit is set.

Why this is exact: if no q in S(p) leaks and none lies on the ring, every foreground neighbour of
a q in S(p) has q's label and lies inside the window, so S(p) is closed under 8-adjacency: it is
p's whole component, of ``count`` pixels. Conversely a component of fewer than m pixels has one
label (step 1), lies within distance m - 2 of each of its pixels (inside the window, off the
ring) and no pixel of it leaks. So ``small`` holds exactly for the pixels of components with
fewer than m pixels: the result equals ``scipy.ndimage.label`` with 8-connectivity and removing
the components below m (``filter_small``; tests compare the two).

Ids must be exact in float32 and unique: images up to ``MAX_SIDE`` pixels a side (the scorers
tile anything above 512). Cost: (2R + 1)^2 window offsets of about eight elementwise ops each.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper
from scipy import ndimage

from vision.packaging.spec import MAX_MIN_SIZE

MAX_SIDE = 4096  # pixels a side the ids stay exact and unique for (MAX_SIDE**2 <= 2**24)
BIG = float(2**25)  # above every id: background for the neighbour minimum
INT64_MAX = 2**63 - 1
SUM_CHUNK = 8  # window terms summed per node
_STRUCT_8 = np.ones((3, 3), dtype=bool)


def filter_small(mask: np.ndarray, min_size: int) -> np.ndarray:
    """The reference: ``mask`` (N, H, W) bool less its 8-connected components of < ``min_size`` px."""
    out = np.asarray(mask, dtype=bool).copy()
    if min_size <= 1:
        return out
    for image in out:
        labels, count = ndimage.label(image, structure=_STRUCT_8)
        if count:
            area = np.bincount(labels.ravel(), minlength=count + 1)
            small = np.flatnonzero(area < min_size)
            image[np.isin(labels, small[small > 0])] = False
    return out


class _Builder:
    """Nodes and constants of one block, each name under a prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.nodes, self.inits = prefix, list[NodeProto](), list[TensorProto]()
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}_{self._n}"

    def const(self, hint: str, value: np.ndarray | np.floating[Any]) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str = "", **attrs: Any) -> str:
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def max3(self, x: str) -> str:
        return self.op("MaxPool", [x], "max3", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])


def _ids(b: _Builder, fg: str) -> str:
    """(N, 1, H, W) float: a unique positive id per foreground pixel, 0 on the background."""
    shape = b.op("Shape", [fg])
    sides = [b.op("Gather", [shape, b.const("axis", np.array([axis], np.int64))], axis=0) for axis in (2, 3)]
    axis = np.arange(MAX_SIDE, dtype=np.float32)
    zero, first = b.const("zero", np.array([0], np.int64)), b.const("first", np.array([0], np.int64))
    rows = b.op("Slice", [b.const("rows", axis * MAX_SIDE), zero, sides[0], first])  # (H,)
    cols = b.op("Slice", [b.const("cols", axis + 1), zero, sides[1], first])  # (W,)
    grid = b.op("Add", [b.op("Unsqueeze", [rows, b.const("ax1", np.array([1], np.int64))]), cols])  # (H, W)
    return b.op("Mul", [fg, grid], "ids")


def _labels(b: _Builder, fg: str, iterations: int) -> str:
    label = _ids(b, fg)
    for _ in range(iterations):
        label = b.op("Mul", [b.max3(label), fg], "label")
    return label


def _leak(b: _Builder, fg: str, label: str) -> str:
    """1 where a foreground pixel has a foreground 8-neighbour with another label, else 0."""
    background = b.op("Sub", [b.const("one", np.float32(1.0)), fg])
    high = b.op("Add", [label, b.op("Mul", [background, b.const("big", np.float32(BIG))])])
    low = b.op("Neg", [b.max3(b.op("Neg", [high]))])  # 3x3 minimum over the foreground
    differs = b.op("Or", [b.op("Greater", [b.max3(label), label]), b.op("Less", [low, label])])
    return b.op("Mul", [b.op("Cast", [differs], to=TensorProto.FLOAT), fg], "leak")


def _shift(b: _Builder, padded: str, dy: int, dx: int, radius: int) -> str:
    """``padded`` (radius on each side) cut back to (H, W), offset by (dy, dx)."""
    starts = [radius + dy, radius + dx]
    ends = [-(radius - d) if radius - d > 0 else INT64_MAX for d in (dy, dx)]
    return b.op(
        "Slice",
        [
            padded,
            b.const("s", np.array(starts, np.int64)),
            b.const("e", np.array(ends, np.int64)),
            b.const("a", np.array([2, 3], np.int64)),
        ],
        "shift",
    )


def _total(b: _Builder, terms: list[str]) -> str:
    """The sum of ``terms``, in variadic ``Sum`` nodes of at most SUM_CHUNK inputs (each input stays
    alive until its node runs, so a chunk bounds the memory the window needs)."""
    while len(terms) > 1:
        terms = [
            b.op("Sum", terms[i : i + SUM_CHUNK], "sum") if len(terms[i : i + SUM_CHUNK]) > 1 else terms[i]
            for i in range(0, len(terms), SUM_CHUNK)
        ]
    return terms[0]


def keep_nodes(fg: str, min_size: int, prefix: str = "cc/") -> tuple[str, list[NodeProto], list[TensorProto]]:
    """Nodes that turn ``fg`` (N, 1, H, W) float in {0, 1} into the bool mask of the pixels of
    components with at least ``min_size`` pixels; returns (output name, nodes, initialisers)."""
    if not 2 <= min_size <= MAX_MIN_SIZE:
        raise ValueError(f"min_size {min_size} outside 2..{MAX_MIN_SIZE}")
    b, radius = _Builder(prefix), min_size - 1
    label = _labels(b, fg, min_size - 1)
    leak = _leak(b, fg, label)
    pads = b.const("pads", np.array([0, 0, radius, radius, 0, 0, radius, radius], np.int64))
    padded_label, padded_leak = (b.op("Pad", [x, pads], "pad") for x in (label, leak))
    counts, hits, rings = [], [], []
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            same_bool = b.op("Equal", [_shift(b, padded_label, dy, dx, radius), label])
            same = b.op("Cast", [same_bool], to=TensorProto.FLOAT)
            counts.append(same)
            hits.append(b.op("Mul", [same, _shift(b, padded_leak, dy, dx, radius)]))
            if max(abs(dy), abs(dx)) == radius:
                rings.append(same)
    count, leak_hit, ring_hit = (_total(b, terms) for terms in (counts, hits, rings))
    limit = b.const("limit", np.float32(min_size))
    zero = b.const("fzero", np.float32(0.0))
    closed = b.op("And", [b.op("Equal", [leak_hit, zero]), b.op("Equal", [ring_hit, zero])])
    small = b.op("And", [closed, b.op("Less", [count, limit])])
    is_fg = b.op("Greater", [fg, b.const("half", np.float32(0.5))])
    keep = b.op("And", [is_fg, b.op("Not", [small])], "keep")
    return keep, b.nodes, b.inits


__all__ = ["MAX_MIN_SIZE", "MAX_SIDE", "filter_small", "keep_nodes"]
