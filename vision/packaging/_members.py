"""The members of an ensemble: read, checked against the model contract and against each other.

Members are ONNX models other tickets' sandboxes wrote (the host copied them out and staged them
read-only); they are parsed here, inside the packaging sandbox, never on the host. Every member
must have the contract's signature (one float32 input ``image`` and one output ``prob``, both
``[N, 1, H, W]``), no external data, and the same default-domain opset, input shape and output
shape as the others (a static side counts, a named dynamic one does not): anything else is a
``PackageRefused`` that names the member and what differs, before anything is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import onnx

from vision.onnx_infer import INPUT_NAME, OUTPUT_NAME
from vision.packaging.spec import MAX_MEMBERS, PackageRefused

MAX_MEMBER_BYTES = 256 * 1024**2  # one member file (the gate's own model cap); past it: refused
STANDARD_DOMAINS = ("", "ai.onnx")

Dims = tuple[int | None, ...]  # a tensor's shape: a static side, or None for a dynamic one


@dataclass(frozen=True)
class Member:
    """One parsed member model and what the ensemble must agree on."""

    name: str  # the file name, for messages
    sha256: str
    model: onnx.ModelProto
    opset: int
    ir_version: int
    input_dims: Dims
    output_dims: Dims


def _dims(value: onnx.ValueInfoProto) -> Dims:
    shape = value.type.tensor_type.shape
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in shape.dim)


def show(dims: Dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _opset(model: onnx.ModelProto, name: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS]
    others = [o.domain for o in model.opset_import if o.domain not in STANDARD_DOMAINS]
    if others or len(versions) != 1:
        raise PackageRefused(f"member {name}: needs exactly the standard opset; imports {others or versions}")
    return versions[0]


def _check_signature(model: onnx.ModelProto, name: str) -> None:
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in graph.output] != [OUTPUT_NAME]:
        raise PackageRefused(
            f"member {name}: signature {[i.name for i in inputs]} -> {[o.name for o in graph.output]}; "
            f"the model contract is one input {INPUT_NAME!r} and one output {OUTPUT_NAME!r}"
        )
    for value in (inputs[0], graph.output[0]):
        if value.type.tensor_type.elem_type != onnx.TensorProto.FLOAT or len(_dims(value)) != 4:
            raise PackageRefused(f"member {name}: {value.name!r} must be float32 [N, 1, H, W]")
    if _dims(inputs[0])[0] is not None:
        raise PackageRefused(f"member {name}: its batch axis is static; the flipped views share one batch")
    external = [t.name for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise PackageRefused(f"member {name}: initialisers with external data are refused ({external[:3]})")
    if len(model.functions):
        raise PackageRefused(f"member {name}: model-local functions are refused")


def read_member(path: Path) -> Member:
    """Parse one member file (bytes only: no external data is ever loaded) and check its contract."""
    data = path.read_bytes()
    if len(data) > MAX_MEMBER_BYTES:
        raise PackageRefused(
            f"member {path.name}: {len(data)} bytes, over MAX_MEMBER_BYTES={MAX_MEMBER_BYTES}"
        )
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise PackageRefused(f"member {path.name}: not an ONNX model ({type(exc).__name__})") from None
    _check_signature(model, path.name)
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    (image,) = [i for i in graph.input if i.name not in inits]
    return Member(
        name=path.name,
        sha256=hashlib.sha256(data).hexdigest(),
        model=model,
        opset=_opset(model, path.name),
        ir_version=int(model.ir_version),
        input_dims=_dims(image),
        output_dims=_dims(graph.output[0]),
    )


def check_agree(members: list[Member]) -> None:
    """Raise PackageRefused naming the first member that differs from the first in opset or shape."""
    if not 1 <= len(members) <= MAX_MEMBERS:
        raise PackageRefused(f"an ensemble needs 1 to {MAX_MEMBERS} members; got {len(members)}")
    first = members[0]
    for other in members[1:]:
        for what, a, b in (
            ("input size", show(first.input_dims), show(other.input_dims)),
            ("output shape", show(first.output_dims), show(other.output_dims)),
            ("opset", str(first.opset), str(other.opset)),
        ):
            if a != b:
                raise PackageRefused(
                    f"members disagree on {what}: {first.name} has {a}, {other.name} has {b}; "
                    "an ensemble averages models of one contract (re-export them alike)"
                )


def load_members(paths: list[Path]) -> list[Member]:
    """Read and check every member; raises PackageRefused on the first problem."""
    members = [read_member(path) for path in paths]
    check_agree(members)
    return members


__all__ = ["Member", "check_agree", "load_members", "read_member", "show"]
