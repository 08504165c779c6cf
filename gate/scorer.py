"""The confined scorer (trust rule 3): onnxruntime in a bwrap child that sees no vault.

``score_model(model_path, images) -> prob`` checks the model at intake, starts
``python -I _scorer_child.py`` inside ``bwrap --unshare-all`` with only the Python runtime,
numpy and onnxruntime bound read-only, sends the checked model bytes and the images over a pipe
(raw float32, fixed headers, nothing pickled) and validates what comes back (shape, finite,
range). Labels never enter the child. The API knows nothing of vaults: the runner uses it on
the host for dev metrics and the gate uses it for verdicts.

Limits, enforced on the child: ``CPU_SECONDS`` of CPU time (past it the kernel kills it),
``ADDRESS_SPACE_BYTES`` of memory, no file writes (``RLIMIT_FSIZE`` 0), ``THREADS`` compute
threads, ``WALL_SECONDS`` per answer. Any breach raises ``ScoringError``.
"""

from __future__ import annotations

import os
import resource
import select
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np

from gate import _scorer_child as wire
from gate.intake import CheckedModel, IntakeError, inspect_model

CPU_SECONDS = 600  # CPU time for one scorer child; past this: killed, ScoringError
ADDRESS_SPACE_BYTES = 8 * 1024**3  # virtual memory of the child; past this: allocation fails
THREADS = 2  # onnxruntime intra-op threads (and OMP/MKL threads) in the child
WALL_SECONDS = 300.0  # wall time to wait for one answer; past this: killed, ScoringError
BATCH_IMAGES = 64  # images per frame sent to the child
PROB_TOLERANCE = 1e-4  # outputs outside [0 - tol, 1 + tol] are refused
CHILD_PATH = "/sf/child.py"
_RUNTIME_PACKAGES = ("numpy", "numpy.libs", "onnxruntime")


class ScoringError(Exception):
    """The model could not be scored; the message is the reason for people."""


def _site_packages() -> Path:
    import onnxruntime

    return Path(onnxruntime.__file__).resolve().parent.parent


def bwrap_command(threads: int = THREADS) -> list[str]:
    """The bwrap invocation: runtime read-only, nothing else, every namespace unshared."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ScoringError("bubblewrap (bwrap) is not installed; the gate never scores unconfined")
    base = Path(sys.base_prefix).resolve()
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for system_dir in ("/usr", "/lib", "/lib64", "/bin"):
        if Path(system_dir).is_symlink():
            cmd += ["--symlink", os.readlink(system_dir), system_dir]
        elif Path(system_dir).is_dir():
            cmd += ["--ro-bind", system_dir, system_dir]
    cmd += ["--ro-bind", str(base), str(base), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    site = _site_packages()
    for package in _RUNTIME_PACKAGES:
        if (site / package).exists():
            cmd += ["--ro-bind", str(site / package), f"/sf/site/{package}"]
    cmd += ["--ro-bind", wire.__file__, CHILD_PATH, "--chdir", "/tmp"]
    cmd += [str(python.resolve()), "-I", "-c", _BOOT, str(threads)]
    return cmd


_BOOT = (
    "import sys, runpy; sys.path.insert(0, '/sf/site'); "
    f"sys.argv = ['{CHILD_PATH}'] + sys.argv[1:]; runpy.run_path('{CHILD_PATH}', run_name='__main__')"
)


def _limit_child() -> None:  # runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _child_env(threads: int) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[key] = str(threads)
    return env


class ConfinedScorer:
    """One confined child holding one checked model; score batches until closed."""

    def __init__(self, model: CheckedModel, threads: int = THREADS, wall_seconds: float = WALL_SECONDS):
        self.model = model
        self.wall_seconds = wall_seconds
        self._proc = subprocess.Popen(
            bwrap_command(threads), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=_child_env(threads), preexec_fn=_limit_child,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in: IO[bytes] = self._proc.stdin
        self._out: IO[bytes] = self._proc.stdout
        self._send(wire.MAGIC_MODEL + struct.pack("<Q", len(model.data)) + model.data)
        self._expect(wire.MAGIC_READY)

    def __enter__(self) -> ConfinedScorer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
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
        parts = [self._score_batch(images[i : i + BATCH_IMAGES]) for i in range(0, len(images), BATCH_IMAGES)]
        return np.concatenate(parts) if parts else np.zeros((0, 1, *images.shape[1:]), np.float32)

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
            raise ScoringError("scorer child closed its input") from None

    def _expect(self, magic: bytes) -> None:
        got = self._read(4)
        if got == wire.MAGIC_ERROR:
            (size,) = struct.unpack("<I", self._read(4))
            message = self._read(min(size, 4096)).decode(errors="replace")
            raise ScoringError(f"scorer child failed: {message}")
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
                raise ScoringError(f"scorer child gave no answer within WALL_SECONDS={self.wall_seconds}")
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                code = self._proc.wait()
                raise ScoringError(f"scorer child exited early (code {code}; a limit may have killed it)")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def score_checked(model: CheckedModel, images: np.ndarray, threads: int = THREADS) -> np.ndarray:
    """Score already-checked model bytes on images (N, H, W) -> prob (N, 1, H, W)."""
    with ConfinedScorer(model, threads=threads) as scorer:
        return scorer.score(images)


def score_model(model_path: Path | str, images: np.ndarray, threads: int = THREADS) -> np.ndarray:
    """Intake-check ``model_path`` and score it confined. Raises IntakeError or ScoringError."""
    return score_checked(inspect_model(Path(model_path)), images, threads=threads)


__all__ = ["ConfinedScorer", "IntakeError", "ScoringError", "score_checked", "score_model", "bwrap_command"]
