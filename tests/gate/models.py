"""Tiny ONNX graphs for gate tests, built with onnx.helper (good ones and hostile ones)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def _io(out_shape: list[str | int | None] | None = None) -> tuple[onnx.ValueInfoProto, onnx.ValueInfoProto]:
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
    prob = helper.make_tensor_value_info("prob", TensorProto.FLOAT, out_shape or ["N", 1, "H", "W"])
    return image, prob


def _model(
    nodes: list[onnx.NodeProto],
    inits: list[TensorProto] | None = None,
    out_shape: list[str | int | None] | None = None,
    opset: list[onnx.OperatorSetIdProto] | None = None,
) -> onnx.ModelProto:
    image, prob = _io(out_shape)
    graph = helper.make_graph(nodes, "g", [image], [prob], initializer=inits or [])
    model = helper.make_model(graph, opset_imports=opset or OPSET)
    model.ir_version = 8
    return model


def threshold_model(scale: float = 20.0, bias: float = -0.5) -> onnx.ModelProto:
    """prob = sigmoid(scale * (image + bias)): a 'dark/bright' detector with a knob to vary it."""
    inits = [
        numpy_helper.from_array(np.array(bias, np.float32), "b"),
        numpy_helper.from_array(np.array(scale, np.float32), "s"),
    ]
    nodes = [
        helper.make_node("Add", ["image", "b"], ["x"]),
        helper.make_node("Mul", ["x", "s"], ["y"]),
        helper.make_node("Sigmoid", ["y"], ["prob"]),
    ]
    return _model(nodes, inits)


def conv_model(channels: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A small conv net: conv3x3 -> relu -> conv1x1 -> sigmoid."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.3, (channels, 1, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (1, channels, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    nodes = [
        helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Sigmoid", ["c2"], ["prob"]),
    ]
    return _model(nodes, inits)


def custom_domain_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Evil", ["image"], ["prob"], domain="com.evil")]
    return _model(nodes, opset=[*OPSET, helper.make_opsetid("com.evil", 1)])


def epcontext_model() -> onnx.ModelProto:
    nodes = [helper.make_node("EPContext", ["image"], ["prob"], domain="com.microsoft")]
    return _model(nodes, opset=[*OPSET, helper.make_opsetid("com.microsoft", 1)])


def unbounded_loop_model() -> onnx.ModelProto:
    """A Loop with an empty trip count (runs while cond holds: forever)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["v_in"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None),
        ],
    )
    inits = [numpy_helper.from_array(np.array(True), "cond")]
    nodes = [helper.make_node("Loop", ["", "cond", "image"], ["prob"], body=body)]
    return _model(nodes, inits)


def huge_constant_of_shape_model() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array([100000, 100000, 100], np.int64), "shape")]
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"]),
        helper.make_node("Identity", ["image"], ["prob"]),
    ]
    return _model(nodes, inits)


def short_range_model() -> onnx.ModelProto:
    """A Range node given two constant inputs instead of three: a shape the intake's own bound
    check once failed on with an unexpected exception (not a refusal)."""
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "start"),
        numpy_helper.from_array(np.array(4, np.int64), "limit"),
    ]
    nodes = [
        helper.make_node("Range", ["start", "limit"], ["r"]),
        helper.make_node("Identity", ["image"], ["prob"]),
    ]
    return _model(nodes, inits)


def wrong_output_shape_model() -> onnx.ModelProto:
    """Declares [N, 1, H, W] but returns [N, 1, H/2, W/2] at run time (caught by the parent)."""
    nodes = [
        helper.make_node("MaxPool", ["image"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sigmoid", ["p"], ["prob"]),
    ]
    return _model(nodes)


def wrong_signature_model() -> onnx.ModelProto:
    model = threshold_model()
    model.graph.output[0].name = "logits"
    model.graph.node[-1].output[0] = "logits"
    return model


def external_data_model(target: str) -> onnx.ModelProto:
    """An initialiser whose bytes are said to live in ``target`` (e.g. a vault file)."""
    model = threshold_model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", target), ("offset", "0"), ("length", "4")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return model


class _Boom:
    """Unpickling this would create the file named by ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def pickle_payload(marker: Path) -> bytes:
    return pickle.dumps(_Boom(str(marker)))


def ensemble_model(members: int = 3, flipped: bool = True, channels: int = 4) -> onnx.ModelProto:
    """``members`` copies of ``conv_model``'s net, averaged; with ``flipped`` each also sees the image
    flipped left-right and its output is flipped back (a packaged ensemble's flip views)."""
    inits = [
        numpy_helper.from_array(np.array([-1], np.int64), "s_start"),
        numpy_helper.from_array(np.array([-(2**62)], np.int64), "s_end"),
        numpy_helper.from_array(np.array([3], np.int64), "s_axis"),
        numpy_helper.from_array(np.array([-1], np.int64), "s_step"),
    ]
    flip = ["s_start", "s_end", "s_axis", "s_step"]
    nodes = [helper.make_node("Slice", ["image", *flip], ["flip"])] if flipped else []
    outputs = []
    for k in range(members):
        rng = np.random.default_rng(k)
        inits += [
            numpy_helper.from_array(rng.normal(0, 0.3, (channels, 1, 3, 3)).astype(np.float32), f"w1_{k}"),
            numpy_helper.from_array(rng.normal(0, 0.3, (1, channels, 1, 1)).astype(np.float32), f"w2_{k}"),
        ]
        for view in ("image", "flip") if flipped else ("image",):
            tag = f"{k}_{view}"
            nodes += [
                helper.make_node("Conv", [view, f"w1_{k}"], [f"c1_{tag}"], pads=[1, 1, 1, 1]),
                helper.make_node("Relu", [f"c1_{tag}"], [f"r1_{tag}"]),
                helper.make_node("Conv", [f"r1_{tag}", f"w2_{k}"], [f"p_{tag}"]),
            ]
            if view == "flip":  # back to the image's orientation
                nodes.append(helper.make_node("Slice", [f"p_{tag}", *flip], [f"u_{tag}"]))
                outputs.append(f"u_{tag}")
            else:
                outputs.append(f"p_{tag}")
    nodes += [helper.make_node("Mean", outputs, ["mean"]), helper.make_node("Sigmoid", ["mean"], ["prob"])]
    return _model(nodes, inits)


def conv_in_loop_model() -> onnx.ModelProto:
    """A bounded Loop whose body holds a convolution: its cost is the trip count's business."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(0, 0.3, (1, 1, 3, 3)).astype(np.float32), "w_body")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Conv", ["v_in", "w_body"], ["v_out"], pads=[1, 1, 1, 1]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None),
        ],
        initializer=[weight],
    )
    inits = [
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.array(3, np.int64), "trips"),
    ]
    nodes = [
        helper.make_node("Loop", ["trips", "cond", "image"], ["looped"], body=body),
        helper.make_node("Sigmoid", ["looped"], ["prob"]),
    ]
    return _model(nodes, inits)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path
