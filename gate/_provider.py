"""Which onnxruntime provider scores a tier version, pinned with it: verdicts never move silently.

Scores of one model on one tier version must not depend on the machine the gate happens to run
on. CUDA and CPU kernels round differently, so a provider is part of what a tier version means:

- The first time a tier version is scored, the gate pins the provider it scores with in
  ``vault/tiers/<tier>/v<N>/scoring.json`` (``provider``, and for CUDA the GPU's UUID and
  model), written whole and never rewritten. Every later score of that version uses it.
- The provider a new pin takes is this machine's best: ``CUDAExecutionProvider`` where the host
  has an NVIDIA GPU and the ``onnxruntime-gpu`` distribution is installed, else
  ``CPUExecutionProvider``. Found without importing onnxruntime (the gate process must not load
  the code that runs attacker bytes; ``gate._confine``).
- A version pinned to CPU stays on CPU on a GPU machine (onnxruntime-gpu has the CPU provider
  too). A version pinned to CUDA on a machine without it cannot be scored: a ``ScoringError``
  tells a person to rotate the tier (``segfactory gate rotate``), which makes a new version that
  pins this machine's provider. A change of provider is a new version, never a silent change of
  scores.
- The confined child is told the one provider and refuses to fall back (``gate._scorer_child``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from segfactory.gpus import Gpu, host_gpus

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
PROVIDERS = (CPU, CUDA)
PIN_FILE = "scoring.json"  # in vault/tiers/<tier>/v<N>/
GPU_DISTRIBUTION = "onnxruntime-gpu"  # the onnxruntime build with the CUDA provider


class ProviderError(Exception):
    """The provider a tier version is pinned to cannot run on this machine."""


@dataclass(frozen=True)
class Scoring:
    """How a tier version is scored: the provider, and the GPU when it is CUDA."""

    provider: str
    gpu: Gpu | None = None

    def record(self) -> dict[str, object]:
        gpu = None if self.gpu is None else {"uuid": self.gpu.uuid, "model": self.gpu.model}
        return {"provider": self.provider, "gpu": gpu}


def _has_gpu_runtime() -> bool:
    try:
        metadata.distribution(GPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return False
    return True


def machine_scoring(gpus: list[Gpu] | None = None, gpu_runtime: bool | None = None) -> Scoring:
    """This machine's best provider: CUDA on its first GPU when it has one and onnxruntime-gpu."""
    gpus = host_gpus() if gpus is None else gpus
    runtime = _has_gpu_runtime() if gpu_runtime is None else gpu_runtime
    if gpus and runtime:
        return Scoring(CUDA, gpus[0])
    return Scoring(CPU)


def pinned_scoring(
    version_dir: Path, machine: Scoring | None = None, gpus: list[Gpu] | None = None, *, pin_it: bool = True
) -> Scoring:
    """The scoring a tier version is pinned to, pinning ``machine`` (default: this machine's)
    the first time (with ``pin_it``; without, an unpinned version only answers what it would
    pin, so that a check before any scoring leaves nothing behind). ProviderError when it is
    pinned to CUDA and this machine cannot run it."""
    pin = version_dir / PIN_FILE
    if not pin.is_file():
        if not pin_it:
            return machine or machine_scoring(gpus)
        _write_once(pin, (machine or machine_scoring(gpus)).record())
    recorded = json.loads(pin.read_text())
    provider = recorded.get("provider")
    if provider == CPU:
        return Scoring(CPU)
    if provider != CUDA:
        raise ProviderError(f"{pin} names provider {provider!r}; known: {', '.join(PROVIDERS)}")
    here = machine_scoring(gpus) if machine is None else machine
    if here.provider != CUDA or here.gpu is None:
        raise ProviderError(
            f"tier version {version_dir.parent.name} {version_dir.name} is scored with {CUDA} "
            f"(pinned in {pin}) and this machine cannot run it (no NVIDIA GPU or no {GPU_DISTRIBUTION}); "
            "a change of provider is a new version: a person rotates the tier "
            f"(`segfactory gate rotate --tier {version_dir.parent.name}`)"
        )
    return here


def _write_once(pin: Path, record: dict[str, object]) -> None:
    """Write the pin whole, and only if no other scorer pinned it first."""
    tmp = pin.with_name(f".{pin.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
    try:
        os.link(tmp, pin)  # fails when it exists: the first pin wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


__all__ = ["CPU", "CUDA", "PIN_FILE", "ProviderError", "Scoring", "machine_scoring", "pinned_scoring"]
