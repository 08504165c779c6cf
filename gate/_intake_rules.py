"""The ONNX intake rules, run only inside the confined intake child (``gate.intake``).

This file is self-contained (standard library + onnx, which brings protobuf and numpy): it is
bound alone into a bwrap namespace holding no vault, no home and no network, and started with
``python -I -B``. Parsing attacker bytes with protobuf and running onnx's checker on them happen
here, never in the process that holds the vault. See ``gate.intake`` for the rules in prose.

Wire (same framing as the scorer child):

    parent -> child   MODEL  b"SFM1" u64 nbytes, then the ONNX bytes
    child  -> parent  OK     b"SFOK"                     (every rule passed)
    child  -> parent  REFUSE b"SFRE" u32 nbytes, reason  (a rule refused the model)
    child  -> parent  ERROR  b"SFER" u32 nbytes, message (anything else failed)
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # onnx itself is imported only inside the child, by check()
    from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

# TensorProto enum values fixed by the ONNX specification (onnx.proto3): named here so that
# importing this module (as gate.intake does, for its constants) never loads onnx or protobuf.
EXTERNAL_DATA_LOCATION = 1  # TensorProto.DataLocation.EXTERNAL
FLOAT, INT32, INT64 = 1, 6, 7  # TensorProto.DataType

MAX_MODEL_BYTES = 256 * 1024**2  # bytes on disk; past this: INVALID (model too large)
MAX_INITIALIZER_BYTES = 256 * 1024**2  # summed raw bytes of all weights; past this: INVALID
MAX_NODES = 20_000  # nodes over all (sub)graphs; past this: INVALID
MAX_LOOP_TRIPS = 64  # constant Loop trip count; past this (or non-constant): INVALID
MAX_CONSTANT_ELEMENTS = 16 * 1024**2  # elements a constant shape may ask for; past this: INVALID
MAX_GRAPH_DEPTH = 4  # nesting of subgraphs (Loop/If bodies); past this: INVALID

INPUT_NAME = "image"
OUTPUT_NAME = "prob"
STANDARD_DOMAINS = frozenset({"", "ai.onnx"})

ALLOWED_OPS = frozenset(
    {
        "Abs",
        "Add",
        "And",
        "ArgMax",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "Ceil",
        "Clip",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Conv",
        "ConvTranspose",
        "DepthToSpace",
        "Div",
        "Dropout",
        "Elu",
        "Equal",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "Floor",
        "Gather",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Greater",
        "GreaterOrEqual",
        "GroupNormalization",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "If",
        "InstanceNormalization",
        "LayerNormalization",
        "LeakyRelu",
        "Less",
        "LessOrEqual",
        "Log",
        "Loop",
        "MatMul",
        "Max",
        "MaxPool",
        "Mean",
        "Min",
        "Mish",
        "Mul",
        "Neg",
        "Not",
        "Or",
        "Pad",
        "Pow",
        "PRelu",
        "Range",
        "Reciprocal",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Resize",
        "Round",
        "Selu",
        "Shape",
        "Sigmoid",
        "Sign",
        "Slice",
        "Softmax",
        "Softplus",
        "SpaceToDepth",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tanh",
        "Tile",
        "Transpose",
        "Unsqueeze",
        "Upsample",
        "Where",
    }
)
SHAPE_OPS = {"ConstantOfShape": 0, "Expand": 1, "Tile": 1}  # op -> index of its shape input


def _check_model(model: ModelProto) -> None:
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.node:
        raise RuleViolation("not an ONNX model: no IR version or an empty graph")
    if len(model.functions):
        raise RuleViolation(f"model-local functions are refused ({len(model.functions)} found)")
    if len(model.training_info):
        raise RuleViolation("training info is refused")
    for opset in model.opset_import:
        if opset.domain not in STANDARD_DOMAINS:
            raise RuleViolation(f"custom opset domain {opset.domain!r} is refused")
    budget = _Budget()
    _check_graph(model.graph, budget, depth=0)
    _check_signature(model.graph)


@dataclass
class _Budget:
    nodes: int = 0
    initializer_bytes: int = 0


def _check_graph(graph: GraphProto, budget: _Budget, depth: int) -> None:
    if depth > MAX_GRAPH_DEPTH:
        raise RuleViolation(f"subgraphs nested deeper than MAX_GRAPH_DEPTH={MAX_GRAPH_DEPTH}")
    if len(graph.sparse_initializer):
        raise RuleViolation("sparse initialisers are refused")
    for tensor in graph.initializer:
        _check_tensor(tensor, budget)
    constants = _constant_values(graph)
    for node in graph.node:
        budget.nodes += 1
        if budget.nodes > MAX_NODES:
            raise RuleViolation(f"more than MAX_NODES={MAX_NODES} nodes")
        _check_node(node, constants)
        for attr in node.attribute:
            _check_attribute(attr, budget, depth)


def _check_tensor(tensor: TensorProto, budget: _Budget) -> None:
    if tensor.data_location == EXTERNAL_DATA_LOCATION or len(tensor.external_data):
        raise RuleViolation(
            f"tensor {tensor.name!r} uses external data; only self-contained graphs are accepted"
        )
    count = math.prod(tensor.dims) if tensor.dims else 1
    if count > MAX_CONSTANT_ELEMENTS * 4:
        raise RuleViolation(f"tensor {tensor.name!r} declares {count} elements")
    budget.initializer_bytes += max(len(tensor.raw_data), count * 4)
    if budget.initializer_bytes > MAX_INITIALIZER_BYTES:
        raise RuleViolation(f"weights exceed MAX_INITIALIZER_BYTES={MAX_INITIALIZER_BYTES}")


def _check_attribute(attr: AttributeProto, budget: _Budget, depth: int) -> None:
    if attr.HasField("t"):
        _check_tensor(attr.t, budget)
    for tensor in attr.tensors:
        _check_tensor(tensor, budget)
    if attr.HasField("sparse_tensor") or len(attr.sparse_tensors):
        raise RuleViolation("sparse tensor attributes are refused")
    if attr.HasField("g"):
        _check_graph(attr.g, budget, depth + 1)
    for sub in attr.graphs:
        _check_graph(sub, budget, depth + 1)


def _check_node(node: NodeProto, constants: dict[str, list[int]]) -> None:
    if node.domain not in STANDARD_DOMAINS:
        raise RuleViolation(
            f"node {node.name!r}: custom domain {node.domain!r} op {node.op_type!r} is refused"
        )
    if node.op_type not in ALLOWED_OPS:
        raise RuleViolation(f"node {node.name!r}: op {node.op_type!r} is not on the allowlist")
    if node.op_type == "Loop":
        trips = constants.get(node.input[0]) if node.input and node.input[0] else None
        if not trips or len(trips) != 1 or trips[0] > MAX_LOOP_TRIPS:
            raise RuleViolation(f"node {node.name!r}: Loop without a constant trip count <= {MAX_LOOP_TRIPS}")
    if node.op_type in SHAPE_OPS:
        _check_shape_input(node, constants, SHAPE_OPS[node.op_type])
    if node.op_type == "Range":
        _check_range(node, constants)


def _check_shape_input(node: NodeProto, constants: dict[str, list[int]], index: int) -> None:
    name = node.input[index] if len(node.input) > index else ""
    shape = constants.get(name)
    if shape is None:
        raise RuleViolation(f"node {node.name!r}: {node.op_type} with a non-constant shape input is refused")
    if any(v < 0 for v in shape) or math.prod(max(v, 1) for v in shape) > MAX_CONSTANT_ELEMENTS:
        raise RuleViolation(
            f"node {node.name!r}: {node.op_type} asks for shape {shape[:8]}, over "
            f"MAX_CONSTANT_ELEMENTS={MAX_CONSTANT_ELEMENTS}"
        )


def _check_range(node: NodeProto, constants: dict[str, list[int]]) -> None:
    values = [constants.get(name) for name in node.input[:3]]
    if len(values) != 3 or any(v is None or len(v) != 1 for v in values):
        raise RuleViolation(f"node {node.name!r}: Range with non-constant bounds is refused")
    start, limit, delta = (v[0] for v in values if v is not None)
    if delta == 0 or abs((limit - start) / delta) > MAX_CONSTANT_ELEMENTS:
        raise RuleViolation(f"node {node.name!r}: Range of unbounded length is refused")


def _constant_values(graph: GraphProto) -> dict[str, list[int]]:
    """Small integer constants (initialisers and Constant nodes) by name, for bound checks."""
    found: dict[str, list[int]] = {}
    tensors = [(t.name, t) for t in graph.initializer]
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            tensors += [
                (node.output[0], a.t) for a in node.attribute if a.name == "value" and a.HasField("t")
            ]
    for name, tensor in tensors:
        if tensor.data_type in (INT64, INT32) and math.prod(tensor.dims or [1]) <= 16:
            try:
                from onnx import numpy_helper

                found[name] = [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
            except Exception:  # noqa: BLE001 - a malformed constant is simply not a known bound
                continue
    return found


def _check_signature(graph: GraphProto) -> None:
    init_names = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init_names]
    if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in graph.output] != [OUTPUT_NAME]:
        raise RuleViolation(
            f"signature must be one input {INPUT_NAME!r} and one output {OUTPUT_NAME!r}; got inputs "
            f"{[i.name for i in inputs]} and outputs {[o.name for o in graph.output]}"
        )
    for value in (inputs[0], graph.output[0]):
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type != FLOAT:
            raise RuleViolation(f"{value.name!r} must be float32")
        dims = tensor_type.shape.dim
        if len(dims) != 4 or (dims[1].HasField("dim_value") and dims[1].dim_value != 1):
            raise RuleViolation(f"{value.name!r} must have shape [N, 1, H, W]")


def validate_with_checker(data: bytes) -> None:
    """onnx's own structural checker, run on in-memory bytes after our checks passed."""
    import onnx

    try:
        onnx.checker.check_model(data)
    except Exception as exc:  # onnx raises ValidationError
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise RuleViolation(f"onnx checker: {first[:200]}") from None


class RuleViolation(Exception):
    """A model broke an intake rule; the message is the reason for people."""


def check(data: bytes) -> int | None:
    """Parse ``data`` as plain protobuf and check every rule; raises RuleViolation. Returns the
    model's scoring cost (``scoring_cost``), or None when it cannot be counted."""
    from onnx import ModelProto

    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise RuleViolation(f"not an ONNX protobuf: {type(exc).__name__}") from None
    _check_model(model)
    validate_with_checker(data)
    return scoring_cost(model)


COST_SIDE = 64  # the image side a scoring cost is counted at: only its ratio to the reference's is used
COST_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
MAX_COST = 2**62


def scoring_cost(model: ModelProto) -> int | None:
    """Multiply-accumulates of the model's convolutions and matrix products on one image of
    ``COST_SIDE`` pixels a side, by onnx's shape inference: a function of the bytes alone. None
    when a counted op's shapes cannot be inferred, or such an op sits in a subgraph (a loop body
    runs it an unknown number of times): the gate then gives the model the reference's time."""
    from onnx import ModelProto, shape_inference

    if any(_counts_inside(a) for n in model.graph.node for a in n.attribute):
        return None
    copy = ModelProto()
    copy.CopyFrom(model)
    dims = copy.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != 4:
        return None
    for dim, value in zip(dims, (1, 1, COST_SIDE, COST_SIDE), strict=True):
        dim.ClearField("dim_param")
        dim.dim_value = value
    try:
        inferred = shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - a graph inference cannot follow costs the reference's time
        return None
    shapes = {
        v.name: [d.dim_value if d.HasField("dim_value") else 0 for d in v.type.tensor_type.shape.dim]
        for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)
    }
    weights = {t.name: list(t.dims) for t in inferred.graph.initializer}
    total = 0
    for node in inferred.graph.node:
        if node.op_type in COST_OPS:
            macs = _macs(
                node.op_type,
                shapes.get(node.input[0]),
                weights.get(node.input[1]) or shapes.get(node.input[1]),
                shapes.get(node.output[0]),
            )
            if macs is None:
                return None
            total = min(MAX_COST, total + macs)
    return total


def _macs(op: str, first: list[int] | None, second: list[int] | None, out: list[int] | None) -> int | None:
    """One counted op's multiply-accumulates from its inferred shapes (0: a dimension not inferred)."""
    if not second or 0 in second:
        return None
    if op == "Conv":  # every output element sums over the kernel and its input channels (per group)
        return math.prod(out) * math.prod(second[1:]) if out and 0 not in out else None
    if not first or len(first) < 2:
        return None
    if op == "ConvTranspose":  # every input element spreads over the kernel: its channels are the weight's
        known = [second[0], *first[2:]] if len(first) > 2 else []
        return first[0] * math.prod(known) * math.prod(second[1:]) if known and 0 not in known else None
    if not out or 0 in out or first[-1] == 0:
        return None
    return math.prod(out) * first[-1]  # a matrix product: every output element sums over the shared dim


def _counts_inside(attr: AttributeProto) -> bool:
    """Whether a graph attribute (a loop or branch body) holds an op the cost counts."""
    bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
    return any(
        n.op_type in COST_OPS or any(_counts_inside(a) for a in n.attribute) for b in bodies for n in b.node
    )


MAGIC_MODEL = b"SFM1"
MAGIC_OK = b"SFOK"
MAGIC_REFUSE = b"SFRE"
MAGIC_ERROR = b"SFER"
MAX_MESSAGE_BYTES = 4096  # a reason longer than this is cut


def _read_exact(stream, n: int) -> bytes:  # type: ignore[no-untyped-def]
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            raise EOFError("input closed early")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _frame(out, magic: bytes, message: str) -> None:  # type: ignore[no-untyped-def]
    data = message.encode()[:MAX_MESSAGE_BYTES]
    out.write(magic + struct.pack("<I", len(data)) + data)
    out.flush()


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        if _read_exact(inp, 4) != MAGIC_MODEL:
            raise ValueError("expected a model frame")
        (size,) = struct.unpack("<Q", _read_exact(inp, 8))
        if size > MAX_MODEL_BYTES:
            raise RuleViolation(f"model is {size} bytes, over MAX_MODEL_BYTES={MAX_MODEL_BYTES}")
        cost = check(_read_exact(inp, size))
    except RuleViolation as exc:
        _frame(out, MAGIC_REFUSE, str(exc))
        return 1
    except Exception as exc:  # any other failure on attacker bytes is a refusal too, never a traceback
        _frame(out, MAGIC_ERROR, f"{type(exc).__name__}: {exc}")
        return 1
    out.write(MAGIC_OK + struct.pack("<q", -1 if cost is None else cost))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
