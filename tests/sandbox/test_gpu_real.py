"""GPU passthrough on a real GPU (skipped on a machine without one; ``scripts/gpu-check.sh`` runs
these): a sandbox sees exactly the GPU it was assigned, by count and name, and none without one.
The CPU specification of the same paths is ``tests/sandbox/test_gpu.py``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from sandbox._records import SandboxResult
from segfactory.gpus import host_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not host_gpus(), reason="no NVIDIA GPU on this machine")]

PROBE = (
    "import json, torch; n = torch.cuda.device_count(); "
    "print(json.dumps([n, torch.cuda.get_device_name(0) if n else None, "
    "float((torch.ones(256, 256, device='cuda') @ torch.ones(256, 256, device='cuda')).sum()) "
    "if n else None]))"
)


def _seen(result: SandboxResult) -> list[object]:
    assert result.exit_code == 0, result.stderr.data.decode(errors="replace")[-2000:]
    return list(json.loads(result.stdout.data.decode().strip().splitlines()[-1]))


def test_an_assigned_gpu_is_visible_inside_by_count_and_name_and_computes(
    run_in: Callable[..., SandboxResult],
) -> None:
    gpu = host_gpus()[0]
    count, name, total = _seen(run_in(["python", "-c", PROBE], gpus=[gpu.minor], timeout_s=120))
    assert count == 1 and name == gpu.model and total == 256.0**3


def test_without_an_assignment_the_sandbox_sees_no_gpu(run_in: Callable[..., SandboxResult]) -> None:
    count, name, _ = _seen(run_in(["python", "-c", PROBE], timeout_s=120))
    assert count == 0 and name is None
