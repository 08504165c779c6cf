"""Hardened ONNX intake (trust rule 3): inspect a model as plain protobuf before anything runs it.

``inspect_model(path)`` reads the file once (``O_NOFOLLOW``, size-capped), parses it with the
``onnx`` protobuf classes only (never ``onnx.load`` with external data, never onnxruntime, never
pickle) and checks it against the rules below. It returns the validated bytes and their sha256,
so the scorer runs exactly the bytes that were checked. Any violation raises ``IntakeError``
whose message is the reason for people; agents only ever see ``INVALID``.

Rules:
- at most ``MAX_MODEL_BYTES`` on disk and ``MAX_INITIALIZER_BYTES`` of weights;
- no pickle / zip / non-protobuf payloads; a parsed graph with at least one node;
- no external data anywhere (initialisers, Constant attributes, subgraphs), no sparse
  initialisers, no model-local functions, no training info;
- every node in the standard ONNX domain and in ``ALLOWED_OPS``; no custom domains, no EPContext;
- ``Loop`` only with a constant trip count <= ``MAX_LOOP_TRIPS``; ``Scan`` refused;
- shape-producing ops (``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``) only with constant
  shape inputs whose element count is <= ``MAX_CONSTANT_ELEMENTS``;
- exactly one input ``image`` and one output ``prob``, float32 ``[N, 1, H, W]``.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, numpy_helper

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
        "Abs", "Add", "And", "ArgMax", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip",
        "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "DepthToSpace", "Div",
        "Dropout", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Floor", "Gather", "Gelu",
        "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual",
        "GroupNormalization", "HardSigmoid", "HardSwish", "Identity", "If", "InstanceNormalization",
        "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "Loop", "MatMul", "Max",
        "MaxPool", "Mean", "Min", "Mish", "Mul", "Neg", "Not", "Or", "Pad", "Pow", "PRelu",
        "Range", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "Relu",
        "Reshape", "Resize", "Round", "Selu", "Shape", "Sigmoid", "Sign", "Slice", "Softmax",
        "Softplus", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Tile",
        "Transpose", "Unsqueeze", "Upsample", "Where",
    }
)
SHAPE_OPS = {"ConstantOfShape": 0, "Expand": 1, "Tile": 1}  # op -> index of its shape input
_PICKLE_PREFIXES = (b"\x80", b"PK\x03\x04", b"(", b"c__builtin__", b"cposix", b"}q")


class IntakeError(Exception):
    """A model was refused at intake; the message is the reason for people."""


@dataclass(frozen=True)
class CheckedModel:
    """Bytes that passed intake, with their hash (the verdict cache key)."""

    data: bytes
    sha256: str


def read_capped(path: Path, cap: int = MAX_MODEL_BYTES) -> bytes:
    """Read a regular file without following a final symlink; refuse past ``cap`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise IntakeError(f"cannot open model {path}: {exc.strerror} (symlinks are refused)") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IntakeError(f"model {path} is not a regular file")
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise IntakeError(f"model {path} is larger than MAX_MODEL_BYTES={cap}")
    return data


def inspect_bytes(data: bytes) -> CheckedModel:
    """Check model bytes against every intake rule; returns them with their sha256."""
    if len(data) > MAX_MODEL_BYTES:
        raise IntakeError(f"model is {len(data)} bytes, over MAX_MODEL_BYTES={MAX_MODEL_BYTES}")
    if not data or data.startswith(_PICKLE_PREFIXES):
        raise IntakeError("not an ONNX protobuf (empty, pickle or zip payload); nothing was unpickled")
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise IntakeError(f"not an ONNX protobuf: {type(exc).__name__}") from None
    _check_model(model)
    validate_with_checker(data)
    return CheckedModel(data=data, sha256=hashlib.sha256(data).hexdigest())


def inspect_model(path: Path) -> CheckedModel:
    """Read ``path`` safely and check it; see the module docstring for the rules."""
    return inspect_bytes(read_capped(Path(path)))


def _check_model(model: ModelProto) -> None:
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.node:
        raise IntakeError("not an ONNX model: no IR version or an empty graph")
    if len(model.functions):
        raise IntakeError(f"model-local functions are refused ({len(model.functions)} found)")
    if len(model.training_info):
        raise IntakeError("training info is refused")
    for opset in model.opset_import:
        if opset.domain not in STANDARD_DOMAINS:
            raise IntakeError(f"custom opset domain {opset.domain!r} is refused")
    budget = _Budget()
    _check_graph(model.graph, budget, depth=0)
    _check_signature(model.graph)


@dataclass
class _Budget:
    nodes: int = 0
    initializer_bytes: int = 0


def _check_graph(graph: GraphProto, budget: _Budget, depth: int) -> None:
    if depth > MAX_GRAPH_DEPTH:
        raise IntakeError(f"subgraphs nested deeper than MAX_GRAPH_DEPTH={MAX_GRAPH_DEPTH}")
    if len(graph.sparse_initializer):
        raise IntakeError("sparse initialisers are refused")
    for tensor in graph.initializer:
        _check_tensor(tensor, budget)
    constants = _constant_values(graph)
    for node in graph.node:
        budget.nodes += 1
        if budget.nodes > MAX_NODES:
            raise IntakeError(f"more than MAX_NODES={MAX_NODES} nodes")
        _check_node(node, constants)
        for attr in node.attribute:
            _check_attribute(attr, budget, depth)


def _check_tensor(tensor: TensorProto, budget: _Budget) -> None:
    if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
        raise IntakeError(f"tensor {tensor.name!r} uses external data; only self-contained graphs are accepted")
    count = math.prod(tensor.dims) if tensor.dims else 1
    if count > MAX_CONSTANT_ELEMENTS * 4:
        raise IntakeError(f"tensor {tensor.name!r} declares {count} elements")
    budget.initializer_bytes += max(len(tensor.raw_data), count * 4)
    if budget.initializer_bytes > MAX_INITIALIZER_BYTES:
        raise IntakeError(f"weights exceed MAX_INITIALIZER_BYTES={MAX_INITIALIZER_BYTES}")


def _check_attribute(attr: AttributeProto, budget: _Budget, depth: int) -> None:
    if attr.HasField("t"):
        _check_tensor(attr.t, budget)
    for tensor in attr.tensors:
        _check_tensor(tensor, budget)
    if attr.HasField("sparse_tensor") or len(attr.sparse_tensors):
        raise IntakeError("sparse tensor attributes are refused")
    if attr.HasField("g"):
        _check_graph(attr.g, budget, depth + 1)
    for sub in attr.graphs:
        _check_graph(sub, budget, depth + 1)


def _check_node(node: NodeProto, constants: dict[str, list[int]]) -> None:
    if node.domain not in STANDARD_DOMAINS:
        raise IntakeError(f"node {node.name!r}: custom domain {node.domain!r} op {node.op_type!r} is refused")
    if node.op_type not in ALLOWED_OPS:
        raise IntakeError(f"node {node.name!r}: op {node.op_type!r} is not on the allowlist")
    if node.op_type == "Loop":
        trips = constants.get(node.input[0]) if node.input and node.input[0] else None
        if not trips or len(trips) != 1 or trips[0] > MAX_LOOP_TRIPS:
            raise IntakeError(f"node {node.name!r}: Loop without a constant trip count <= {MAX_LOOP_TRIPS}")
    if node.op_type in SHAPE_OPS:
        _check_shape_input(node, constants, SHAPE_OPS[node.op_type])
    if node.op_type == "Range":
        _check_range(node, constants)


def _check_shape_input(node: NodeProto, constants: dict[str, list[int]], index: int) -> None:
    name = node.input[index] if len(node.input) > index else ""
    shape = constants.get(name)
    if shape is None:
        raise IntakeError(f"node {node.name!r}: {node.op_type} with a non-constant shape input is refused")
    if any(v < 0 for v in shape) or math.prod(max(v, 1) for v in shape) > MAX_CONSTANT_ELEMENTS:
        raise IntakeError(
            f"node {node.name!r}: {node.op_type} asks for shape {shape[:8]}, over "
            f"MAX_CONSTANT_ELEMENTS={MAX_CONSTANT_ELEMENTS}"
        )


def _check_range(node: NodeProto, constants: dict[str, list[int]]) -> None:
    values = [constants.get(name) for name in node.input[:3]]
    if any(v is None or len(v) != 1 for v in values):
        raise IntakeError(f"node {node.name!r}: Range with non-constant bounds is refused")
    start, limit, delta = (v[0] for v in values if v is not None)
    if delta == 0 or abs((limit - start) / delta) > MAX_CONSTANT_ELEMENTS:
        raise IntakeError(f"node {node.name!r}: Range of unbounded length is refused")


def _constant_values(graph: GraphProto) -> dict[str, list[int]]:
    """Small integer constants (initialisers and Constant nodes) by name, for bound checks."""
    found: dict[str, list[int]] = {}
    tensors = [(t.name, t) for t in graph.initializer]
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            tensors += [(node.output[0], a.t) for a in node.attribute if a.name == "value" and a.HasField("t")]
    for name, tensor in tensors:
        if tensor.data_type in (TensorProto.INT64, TensorProto.INT32) and math.prod(tensor.dims or [1]) <= 16:
            try:
                found[name] = [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
            except Exception:  # noqa: BLE001 - a malformed constant is simply not a known bound
                continue
    return found


def _check_signature(graph: GraphProto) -> None:
    init_names = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init_names]
    if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in graph.output] != [OUTPUT_NAME]:
        raise IntakeError(
            f"signature must be one input {INPUT_NAME!r} and one output {OUTPUT_NAME!r}; got inputs "
            f"{[i.name for i in inputs]} and outputs {[o.name for o in graph.output]}"
        )
    for value in (inputs[0], graph.output[0]):
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type != TensorProto.FLOAT:
            raise IntakeError(f"{value.name!r} must be float32")
        dims = tensor_type.shape.dim
        if len(dims) != 4 or (dims[1].HasField("dim_value") and dims[1].dim_value != 1):
            raise IntakeError(f"{value.name!r} must have shape [N, 1, H, W]")


def validate_with_checker(data: bytes) -> None:
    """onnx's own structural checker, run on in-memory bytes after our checks passed."""
    try:
        onnx.checker.check_model(data)
    except Exception as exc:  # onnx raises ValidationError
        raise IntakeError(f"onnx checker: {str(exc).splitlines()[0][:200]}") from None
