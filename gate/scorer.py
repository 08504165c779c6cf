"""The confined scorer (trust rule 3): onnxruntime in a bwrap child that sees no vault.

``score_model(model_path, images) -> prob`` checks the model at intake, starts
``python -I -B _scorer_child.py`` inside ``bwrap --unshare-all`` with only the Python runtime,
numpy and onnxruntime bound read-only, sends the checked model bytes and the images over a pipe
(raw float32, fixed headers, nothing pickled) and validates what comes back (shape, finite,
range). Labels never enter the child. The API knows nothing of vaults: the runner uses it on
the host for dev metrics and the gate uses it for verdicts.

Limits, enforced on the child: ``CPU_SECONDS`` of CPU time (past it the kernel kills it),
``ADDRESS_SPACE_BYTES`` of memory, no file writes (``RLIMIT_FSIZE`` 0), ``THREADS`` compute
threads, ``WALL_SECONDS`` per answer. Any breach raises ``ScoringError``. The provider is the
CPU's unless a ``Scoring`` names CUDA (``gate._provider``); then the child also gets that one
GPU's device nodes, only it is visible (``CUDA_VISIBLE_DEVICES``), and RLIMIT_DATA replaces
RLIMIT_AS (``gate._confine.limit_cuda_child``).
"""

from __future__ import annotations

import importlib.util
import os
import select
import struct
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np

from gate import _scorer_child as wire
from gate._confine import (
    ADDRESS_SPACE_BYTES,
    CPU_SECONDS,
    ConfinementError,
    child_env,
    confined_command,
    limit_child,
    limit_cuda_child,
)
from gate._provider import CPU, Scoring
from gate.intake import CheckedModel, IntakeError, inspect_model
from segfactory.gpus import DEV, GpuPlan
from vision.tiling import predict_batched

CPU_SCORING = Scoring(CPU)  # the runner's dev scoring, and any tier version pinned to the CPU
GPU_DEV = DEV  # where the scoring GPU's device nodes are (tests point it at stand-in nodes)

THREADS = 2  # onnxruntime intra-op threads (and OMP/MKL threads) in the child
WALL_SECONDS = 300.0  # wall time to wait for one answer; past this: killed, ScoringError
BATCH_IMAGES = 64  # images per frame sent to the child
PROB_TOLERANCE = 1e-4  # outputs outside [0 - tol, 1 + tol] are refused
SCORER_PACKAGES = ("numpy", "onnxruntime")  # found unimported: the parent never loads onnxruntime


# What a scorer child says when the machine, not the model, ran out: memory on the host or the GPU
RESOURCE_MARKERS = (
    "out of memory",
    "outofmemory",
    "memoryerror",
    "bad_alloc",
    "failed to allocate",
    "cudaerrormemoryallocation",
)


class ScoringError(Exception):
    """The model could not be scored; the message is the reason for people. ``resource``: the
    machine failed it (the child was killed, ran out of memory or time), not the model's bytes, so
    the verdict is not a property of the model and must not be cached."""

    def __init__(self, message: str, *, resource: bool = False) -> None:
        super().__init__(message)
        self.resource = resource


def bwrap_command(threads: int = THREADS, scoring: Scoring = CPU_SCORING) -> list[str]:
    """The bwrap invocation: runtime read-only, nothing else, every namespace unshared. On CUDA
    also the scoring GPU's device nodes (and the driver's control nodes) and, where pip installed
    them, the CUDA libraries (``nvidia``), read-only; never another GPU."""
    try:
        if scoring.provider == CPU:
            return confined_command(wire.__file__, SCORER_PACKAGES, [str(threads), CPU])
        assert scoring.gpu is not None
        packages = (*SCORER_PACKAGES, *(("nvidia",) if importlib.util.find_spec("nvidia") else ()))
        devices = GpuPlan(gpus=(scoring.gpu,), dev=GPU_DEV).bwrap_args()
        return confined_command(wire.__file__, packages, [str(threads), scoring.provider], devices=devices)
    except ConfinementError as exc:
        raise ScoringError(str(exc), resource=True) from None


def scorer_env(threads: int, scoring: Scoring = CPU_SCORING) -> dict[str, str]:
    """The child's whole environment; on CUDA the scoring GPU's UUID as the only visible device."""
    gpus = () if scoring.gpu is None else (scoring.gpu,)
    return {**child_env(threads), **GpuPlan(gpus=gpus).env()}


class ConfinedScorer:
    """One confined child holding one checked model; score batches until closed."""

    def __init__(
        self,
        model: CheckedModel,
        threads: int = THREADS,
        wall_seconds: float = WALL_SECONDS,
        scoring: Scoring = CPU_SCORING,
    ):
        self.model = model
        self.wall_seconds = wall_seconds
        self._proc = subprocess.Popen(
            bwrap_command(threads, scoring),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=scorer_env(threads, scoring),
            preexec_fn=limit_child if scoring.provider == CPU else limit_cuda_child,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in: IO[bytes] = self._proc.stdin
        self._out: IO[bytes] = self._proc.stdout
        self._send(wire.MAGIC_MODEL + struct.pack("<Q", len(model.data)) + model.data)
        self._expect(wire.MAGIC_READY)

    def __enter__(self) -> ConfinedScorer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for stream in (self._in, self._out):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def score(self, images: np.ndarray) -> np.ndarray:
        """Probabilities (N, 1, H, W) float32 for images (N, H, W) in [0, 1]."""
        if images.ndim != 3:
            raise ScoringError(f"images must be (N, H, W); got shape {images.shape}")
        if not len(images):
            return np.zeros((0, 1, *images.shape[1:]), np.float32)
        # pixel-bounded frames, a large image in tiles: the pieces the trainer scores it in too
        return predict_batched(lambda batch: self._score_batch(batch)[:, 0], images, BATCH_IMAGES)[:, None]

    def _score_batch(self, batch: np.ndarray) -> np.ndarray:
        n, h, w = batch.shape
        data = np.ascontiguousarray(batch, dtype="<f4").tobytes()
        self._send(wire.MAGIC_IMAGES + struct.pack("<III", n, h, w) + data)
        self._expect(wire.MAGIC_PROBS)
        shape = struct.unpack("<IIII", self._read(16))
        if shape != (n, 1, h, w):
            self.close()
            raise ScoringError(f"model output shape {list(shape)} != expected {[n, 1, h, w]}")
        prob = np.frombuffer(self._read(n * h * w * 4), dtype="<f4").reshape(n, 1, h, w)
        if not np.isfinite(prob).all():
            raise ScoringError("model output holds NaN or infinity")
        if prob.min() < -PROB_TOLERANCE or prob.max() > 1 + PROB_TOLERANCE:
            raise ScoringError(f"model output outside [0, 1]: min {prob.min():.4g}, max {prob.max():.4g}")
        return np.clip(prob, 0.0, 1.0).astype(np.float32)  # float rounding past 1 by <= tolerance

    def _send(self, frame: bytes) -> None:
        try:
            self._in.write(frame)
            self._in.flush()
        except OSError:  # the child died or refused: read its error frame if it left one
            self._expect(wire.MAGIC_READY)
            raise ScoringError("scorer child closed its input", resource=True) from None

    def _expect(self, magic: bytes) -> None:
        got = self._read(4)
        if got == wire.MAGIC_ERROR:
            (size,) = struct.unpack("<I", self._read(4))
            message = self._read(min(size, 4096)).decode(errors="replace")
            resource = any(marker in message.lower() for marker in RESOURCE_MARKERS)
            raise ScoringError(f"scorer child failed: {message}", resource=resource)
        if got != magic:
            raise ScoringError(f"scorer child broke the protocol: {got!r}")

    def _read(self, n: int) -> bytes:
        deadline = time.monotonic() + self.wall_seconds
        fd = self._out.fileno()
        chunks: list[bytes] = []
        while n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._proc.kill()
                raise ScoringError(
                    f"scorer child gave no answer within WALL_SECONDS={self.wall_seconds}", resource=True
                )
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                code = self._proc.wait()
                raise ScoringError(
                    f"scorer child exited early (code {code}; a limit may have killed it)", resource=True
                )
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def score_checked(
    model: CheckedModel, images: np.ndarray, threads: int = THREADS, scoring: Scoring = CPU_SCORING
) -> np.ndarray:
    """Score already-checked model bytes on images (N, H, W) -> prob (N, 1, H, W); ``scoring``
    names the provider (the gate passes the tier version's pin, ``gate._provider``)."""
    with ConfinedScorer(model, threads=threads, scoring=scoring) as scorer:
        return scorer.score(images)


def score_model(model_path: Path | str, images: np.ndarray, threads: int = THREADS) -> np.ndarray:
    """Intake-check ``model_path`` and score it confined. Raises IntakeError or ScoringError."""
    return score_checked(inspect_model(Path(model_path)), images, threads=threads)


__all__ = [
    "ADDRESS_SPACE_BYTES",
    "CPU_SECONDS",
    "ConfinedScorer",
    "IntakeError",
    "ScoringError",
    "bwrap_command",
    "score_checked",
    "score_model",
]
