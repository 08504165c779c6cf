"""The confined scorer's child: runs onnxruntime on images fed over stdin, answers on stdout.

This file is self-contained (standard library + numpy + onnxruntime): it is bound alone into a
bwrap namespace that holds no vault, no home and no network, and started with ``python -I``.
The wire format is fixed-size little-endian headers and raw float32 bytes; nothing is pickled.
Arguments: the thread count and the one onnxruntime provider to score with (``gate._provider``);
a provider that is not available, or a session that falls back to another, is an error frame.

    parent -> child   MODEL  b"SFM1" u64 nbytes, then the ONNX bytes (once, first)
    child  -> parent  READY  b"SFOK"
    parent -> child   IMAGES b"SFI1" u32 n, u32 h, u32 w, then n*h*w float32
    child  -> parent  PROBS  b"SFP1" u32 n, u32 c, u32 h, u32 w, then n*c*h*w float32
    child  -> parent  ERROR  b"SFER" u32 nbytes, then a UTF-8 message (then the child exits)
"""

from __future__ import annotations

import struct
import sys

MAGIC_MODEL = b"SFM1"
MAGIC_READY = b"SFOK"
MAGIC_IMAGES = b"SFI1"
MAGIC_PROBS = b"SFP1"
MAGIC_ERROR = b"SFER"
MAX_FRAME_BYTES = 1024**3  # one frame's payload; past this the child refuses and exits


def _read_exact(stream, n: int) -> bytes:  # type: ignore[no-untyped-def]
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _error(out, message: str) -> None:  # type: ignore[no-untyped-def]
    data = message.encode()[:4096]
    out.write(MAGIC_ERROR + struct.pack("<I", len(data)) + data)
    out.flush()


def _serve(inp, out, threads: int, provider: str = "CPUExecutionProvider") -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    import onnxruntime as ort

    if _read_exact(inp, 4) != MAGIC_MODEL:
        raise ValueError("expected a model frame")
    (size,) = struct.unpack("<Q", _read_exact(inp, 8))
    if size > MAX_FRAME_BYTES:
        raise ValueError("model frame too large")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    model = _read_exact(inp, size)
    if provider not in ort.get_available_providers():
        raise ValueError(
            f"provider {provider} is not available here; this tier version is scored with it only"
        )
    session = ort.InferenceSession(model, options, providers=[provider])
    if session.get_providers()[0] != provider:  # never a silent fallback to another provider
        raise ValueError(f"onnxruntime fell back from {provider} to {session.get_providers()[0]}")
    out.write(MAGIC_READY)
    out.flush()
    while True:
        try:
            magic = _read_exact(inp, 4)
        except EOFError:
            return
        if magic != MAGIC_IMAGES:
            raise ValueError("expected an images frame")
        n, h, w = struct.unpack("<III", _read_exact(inp, 12))
        if n * h * w * 4 > MAX_FRAME_BYTES:
            raise ValueError("images frame too large")
        images = np.frombuffer(_read_exact(inp, n * h * w * 4), dtype="<f4").reshape(n, 1, h, w)
        (prob,) = session.run(["prob"], {"image": images})
        prob = np.ascontiguousarray(prob, dtype="<f4")
        if prob.ndim != 4:
            raise ValueError(f"output has rank {prob.ndim}, expected 4")
        out.write(MAGIC_PROBS + struct.pack("<IIII", *prob.shape) + prob.tobytes())
        out.flush()


def main() -> int:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    provider = sys.argv[2] if len(sys.argv) > 2 else "CPUExecutionProvider"
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        _serve(inp, out, threads, provider)
    except Exception as exc:  # every failure becomes one error frame, never a traceback
        _error(out, f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
