"""One ONNX graph from several members: flip test-time augmentation, the average, post-processing.

``image`` (N, 1, H, W) goes in once. The flipped views (``Slice`` with step -1 along W and/or H)
are stacked on the batch axis, so every member runs once on (V * N) images; each view's output
is flipped back, and the mean over members and views is the ensemble's probability ``p``.

Post-processing is folded in because the gate thresholds every model at the win rule's fixed
threshold g (``policies/win_rule.yaml``): a chosen threshold t becomes the monotone piecewise-
linear remap q = g * p / t below t and g + (1 - g) * (p - t) / (1 - t) from t on, so q >= g
exactly when p >= t; pixels of components smaller than the chosen minimum size are pushed just
below g (``_components``). The comparisons are made on ``p`` itself and the two branches are
clamped to either side of g, so rounding in the remap cannot move a pixel across.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vision.onnx_infer import INPUT_NAME, OUTPUT_NAME
from vision.packaging._components import keep_nodes
from vision.packaging._members import Member

VIEW_AXES = {"h": (3,), "v": (2,), "hv": (2, 3)}  # flip name -> axes reversed (H is 2, W is 3)
INT64_MIN = -(2**63)
IR_VERSION = 8  # at least what vision.export writes at opset 17; a member's higher version is kept
SPLIT_NUM_OUTPUTS_OPSET = 18  # from this opset an equal Split names its output count
ENSEMBLE = "ensemble_prob"  # the averaged probability before post-processing


class _EqualSplit(TypedDict, total=False):
    """The attributes of a Split into equal parts, beyond its axis."""

    num_outputs: int  # from SPLIT_NUM_OUTPUTS_OPSET on


def _flip(x: str, axes: tuple[int, ...], out: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    n = len(axes)
    consts = [
        numpy_helper.from_array(np.array(v, np.int64), f"{out}/{k}")
        for k, v in (
            ("starts", [-1] * n),
            ("ends", [INT64_MIN] * n),
            ("axes", list(axes)),
            ("steps", [-1] * n),
        )
    ]
    node = helper.make_node("Slice", [x, *(c.name for c in consts)], [out], name=out)
    return [node], consts


def _member_nodes(
    member: Member, index: int, source: str
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """The member's graph with every name under ``m<index>/``, reading ``source``."""
    prefixed = onnx.compose.add_prefix(member.model, f"m{index}/")
    graph = prefixed.graph
    feed = helper.make_node("Identity", [source], [f"m{index}/{INPUT_NAME}"], name=f"m{index}/feed")
    return [feed, *graph.node], list(graph.initializer), graph.output[0].name


def ensemble_nodes(
    members: list[Member], flips: list[str]
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """Nodes from ``image`` to the mean over members and views (``ENSEMBLE``)."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    views = [INPUT_NAME]
    for flip in flips:
        made, consts = _flip(INPUT_NAME, VIEW_AXES[flip], f"tta/in_{flip}")
        nodes += made
        inits += consts
        views.append(f"tta/in_{flip}")
    stacked = INPUT_NAME
    if flips:
        stacked = "tta/stacked"
        nodes.append(helper.make_node("Concat", views, [stacked], name=stacked, axis=0))
    outputs = []
    for index, member in enumerate(members):
        made, weights, out = _member_nodes(member, index, stacked)
        nodes += made
        inits += weights
        outputs.append(out)
    mean = "members/mean" if flips else ENSEMBLE
    nodes.append(helper.make_node("Mean", outputs, [mean], name=mean))
    if flips:
        parts = [f"tta/out_{i}" for i in range(len(views))]
        equal: _EqualSplit = (
            {"num_outputs": len(parts)} if members[0].opset >= SPLIT_NUM_OUTPUTS_OPSET else {}
        )
        nodes.append(helper.make_node("Split", [mean], parts, name="tta/split", axis=0, **equal))
        back = [parts[0]]
        for flip, part in zip(flips, parts[1:], strict=True):
            made, consts = _flip(part, VIEW_AXES[flip], f"tta/back_{flip}")
            nodes += made
            inits += consts
            back.append(f"tta/back_{flip}")
        nodes.append(helper.make_node("Mean", back, [ENSEMBLE], name=ENSEMBLE))
    return nodes, inits, ENSEMBLE


def below(value: float | np.floating[Any]) -> np.float32:
    """The largest float32 below ``value``."""
    return np.nextafter(np.float32(value), np.float32(0.0))


def postprocess_nodes(
    prob: str, threshold: float, min_size: int, gate_threshold: float
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes from ``prob`` (the ensemble's p) to ``OUTPUT_NAME``: q >= gate_threshold exactly on the
    pixels with p >= threshold in components of at least ``min_size`` pixels."""
    t, g = np.float32(threshold), np.float32(gate_threshold)
    consts = {
        "t": t,
        "g": g,
        "g_below": below(g),
        "lo_scale": np.float32(g / t),
        "hi_scale": np.float32((1 - g) / (1 - t)),
        "zero": np.float32(0.0),
        "one": np.float32(1.0),
    }
    inits = [numpy_helper.from_array(np.asarray(v), f"post/{k}") for k, v in consts.items()]
    c = {k: f"post/{k}" for k in consts}

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [f"post/{out}"], name=f"post/{out}", **attrs)

    nodes = [
        node("GreaterOrEqual", [prob, c["t"]], "on"),
        node("Mul", [prob, c["lo_scale"]], "lo"),
        node("Sub", [prob, c["t"]], "above"),
        node("Mul", ["post/above", c["hi_scale"]], "hi_rise"),
        node("Add", ["post/hi_rise", c["g"]], "hi"),
        node("Where", ["post/on", "post/hi", "post/lo"], "remapped"),
    ]
    keep = "post/on"
    if min_size > 1:
        nodes.append(node("Cast", ["post/on"], "fg", to=TensorProto.FLOAT))
        keep, more, consts_cc = keep_nodes("post/fg", min_size, prefix="post/cc/")
        nodes += more
        inits += consts_cc
    nodes += [
        node("Max", ["post/remapped", c["g"]], "up"),
        node("Min", ["post/remapped", c["g_below"]], "down"),
        node("Where", [keep, "post/up", "post/down"], "decided"),
        helper.make_node("Clip", ["post/decided", c["zero"], c["one"]], [OUTPUT_NAME], name="post/clip"),
    ]
    return nodes, inits


def assemble(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], output: str, opset: int, ir_version: int
) -> onnx.ModelProto:
    """A self-contained model with the contract's signature, checked by onnx's checker."""
    if output != OUTPUT_NAME:
        nodes = [*nodes, helper.make_node("Identity", [output], [OUTPUT_NAME], name="out")]
    dims: list[str | int | None] = ["N", 1, "H", "W"]
    graph = helper.make_graph(
        nodes,
        "segfactory-package",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, dims)],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="segfactory"
    )
    model.ir_version = max(IR_VERSION, ir_version)
    onnx.checker.check_model(model)
    return model


__all__ = ["ENSEMBLE", "VIEW_AXES", "assemble", "below", "ensemble_nodes", "postprocess_nodes"]
