"""Hardened ONNX intake (trust rule 3): a model is checked as plain protobuf, confined, before anything
runs it.

``inspect_model(path)`` reads the file once (``O_NOFOLLOW``, size-capped); ``inspect_bytes(data)``
sends the bytes to a confined child (``gate._intake_rules`` in the bwrap namespace of
``gate._confine``: no vault, no home, no network) that parses them with the ``onnx`` protobuf
classes only (never ``onnx.load`` with external data, never onnxruntime, never pickle), checks
them against the rules below and runs onnx's checker. The process calling this never imports
protobuf or onnx, so a parser flaw reached by attacker bytes lands in a namespace that holds
nothing. It returns the validated bytes and their sha256, so the scorer runs exactly the bytes
that were checked. Any violation, and any failure of the child, raises ``IntakeError`` whose
message is the reason for people; agents only ever see ``INVALID``.

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

The child also counts the model's scoring cost (``_intake_rules.scoring_cost``: multiply-
accumulates on one image, by onnx's shape inference), from which the gate sizes that model's
answer time (``gate.replies.AnswerTime.for_cost``).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gate import _intake_rules as rules
from gate._confine import ConfinementError, child_env, confined_command, limit_child

MAX_MODEL_BYTES = rules.MAX_MODEL_BYTES
MAX_INITIALIZER_BYTES = rules.MAX_INITIALIZER_BYTES
MAX_NODES = rules.MAX_NODES
MAX_LOOP_TRIPS = rules.MAX_LOOP_TRIPS
MAX_CONSTANT_ELEMENTS = rules.MAX_CONSTANT_ELEMENTS
MAX_GRAPH_DEPTH = rules.MAX_GRAPH_DEPTH
ALLOWED_OPS = rules.ALLOWED_OPS
INPUT_NAME, OUTPUT_NAME = rules.INPUT_NAME, rules.OUTPUT_NAME
INTAKE_WALL_SECONDS = 120.0  # wall time for one confined intake; past this: killed, IntakeError
INTAKE_PACKAGES = ("onnx", "google", "numpy", "ml_dtypes", "typing_extensions")  # what `import onnx` needs
_PICKLE_PREFIXES = (b"\x80", b"PK\x03\x04", b"(", b"c__builtin__", b"cposix", b"}q")


class IntakeError(Exception):
    """A model was refused at intake; the message is the reason for people."""


class IntakeUnavailable(IntakeError):
    """The confined intake gave no answer (not started, killed by a limit, timed out): no rule decided."""


@dataclass(frozen=True)
class CheckedModel:
    """Bytes that passed intake, with their hash (the verdict cache key) and their scoring cost
    (multiply-accumulates on one image, counted from the bytes alone; None: not countable)."""

    data: bytes
    sha256: str
    cost: int | None = None


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


def _confined_check(data: bytes) -> int | None:
    """Run every rule on ``data`` in the confined child; raises IntakeError with its reason.
    Returns the scoring cost the child counted (None: not countable)."""
    try:
        cmd = confined_command(rules.__file__, INTAKE_PACKAGES, [])
    except ConfinementError as exc:
        raise IntakeUnavailable(f"intake cannot run confined: {exc}") from None
    frame = rules.MAGIC_MODEL + struct.pack("<Q", len(data)) + data
    try:
        done = subprocess.run(
            cmd,
            input=frame,
            capture_output=True,
            env=child_env(1),
            preexec_fn=limit_child,
            timeout=INTAKE_WALL_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise IntakeUnavailable(
            f"intake gave no answer within INTAKE_WALL_SECONDS={INTAKE_WALL_SECONDS}"
        ) from None
    answer = done.stdout
    if answer[:4] == rules.MAGIC_OK and len(answer) == 12 and done.returncode == 0:
        (cost,) = struct.unpack("<q", answer[4:])
        return None if cost < 0 else int(cost)
    if answer[:4] in (rules.MAGIC_REFUSE, rules.MAGIC_ERROR) and len(answer) >= 8:
        (size,) = struct.unpack("<I", answer[4:8])
        message = answer[8 : 8 + size].decode(errors="replace")
        raise IntakeError(
            message if answer[:4] == rules.MAGIC_REFUSE else f"intake failed on the model: {message}"
        )
    raise IntakeUnavailable(
        f"intake child exited with code {done.returncode} without an answer (a limit may have killed it)"
    )


def inspect_bytes(data: bytes) -> CheckedModel:
    """Check model bytes against every intake rule (confined); returns them with their sha256."""
    if len(data) > MAX_MODEL_BYTES:
        raise IntakeError(f"model is {len(data)} bytes, over MAX_MODEL_BYTES={MAX_MODEL_BYTES}")
    if not data or data.startswith(_PICKLE_PREFIXES):
        raise IntakeError("not an ONNX protobuf (empty, pickle or zip payload); nothing was unpickled")
    cost = _confined_check(data)
    return CheckedModel(data=data, sha256=hashlib.sha256(data).hexdigest(), cost=cost)


def inspect_model(path: Path) -> CheckedModel:
    """Read ``path`` safely and check it; see the module docstring for the rules."""
    return inspect_bytes(read_capped(Path(path)))


def inspect_own_model(path: Path) -> CheckedModel:
    """The same rules, run in this process, for a model this process built itself.

    Only ``segfactory init`` uses it, for the classical baseline it has just exported: no agent
    wrote those bytes, so parsing them here opens nothing, and init must work where no confined
    child can start (an unprivileged container, where bwrap has no namespaces). Anything received
    from outside goes through :func:`inspect_model`.
    """
    data = read_capped(Path(path))
    if not data or data.startswith(_PICKLE_PREFIXES):
        raise IntakeError("not an ONNX protobuf (empty, pickle or zip payload); nothing was unpickled")
    try:
        cost = rules.check(data)
    except rules.RuleViolation as exc:
        raise IntakeError(str(exc)) from None
    return CheckedModel(data=data, sha256=hashlib.sha256(data).hexdigest(), cost=cost)
