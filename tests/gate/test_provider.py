"""The scoring provider is pinned with the tier version: first score pins this machine's provider,
later scores keep it, a CUDA pin on a machine without CUDA is refused with "rotate", and the
confined child scores with exactly the provider it is told or refuses (specified on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gate._provider import CPU, CUDA, PIN_FILE, ProviderError, Scoring, machine_scoring, pinned_scoring
from gate.intake import inspect_bytes
from gate.scorer import ScoringError, bwrap_command, score_checked, scorer_env
from segfactory.gpus import Gpu
from tests.gate import models

H200 = Gpu(0, "GPU-0b8c3c52-2a8e-4d8e-9b55-3b8b1e1d0000", "NVIDIA H200", "0000:41:00.0")


def test_this_machines_provider_is_cuda_only_with_a_gpu_and_onnxruntime_gpu() -> None:
    assert machine_scoring([H200], gpu_runtime=True) == Scoring(CUDA, H200)
    assert machine_scoring([H200], gpu_runtime=False) == Scoring(CPU)
    assert machine_scoring([], gpu_runtime=True) == Scoring(CPU)
    assert machine_scoring().provider == CPU  # this machine: no NVIDIA GPU


def test_the_first_score_pins_the_provider_and_later_machines_keep_it(tmp_path: Path) -> None:
    version = tmp_path / "confirm-a" / "v1"
    version.mkdir(parents=True)
    assert pinned_scoring(version, machine=Scoring(CPU)) == Scoring(CPU)
    assert json.loads((version / PIN_FILE).read_text()) == {"provider": CPU, "gpu": None}
    # the same version on a GPU machine later: still the CPU, scores do not move
    assert pinned_scoring(version, machine=Scoring(CUDA, H200)) == Scoring(CPU)


def test_a_cuda_pin_on_a_machine_without_cuda_is_refused_and_names_rotate(tmp_path: Path) -> None:
    version = tmp_path / "confirm-a" / "v2"
    version.mkdir(parents=True)
    assert pinned_scoring(version, machine=Scoring(CUDA, H200)) == Scoring(CUDA, H200)
    with pytest.raises(
        ProviderError,
        match=r"scored with CUDAExecutionProvider .* a change of provider is a new "
        r"version: .*segfactory gate rotate --tier confirm-a",
    ):
        pinned_scoring(version, gpus=[])  # this machine: no GPU
    (version / PIN_FILE).write_text(json.dumps({"provider": "TensorrtExecutionProvider"}))
    with pytest.raises(ProviderError, match="names provider 'TensorrtExecutionProvider'"):
        pinned_scoring(version)


def _stand_in_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Device nodes as the driver makes them, as plain files (this machine has no GPU)."""
    import gate.scorer

    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"):
        (dev / name).touch()
    monkeypatch.setattr(gate.scorer, "GPU_DEV", dev)
    return dev


def test_the_cuda_child_gets_only_its_gpus_nodes_and_uuid_and_the_cpu_child_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = _stand_in_nodes(tmp_path, monkeypatch)
    cpu, cuda = bwrap_command(2), bwrap_command(2, Scoring(CUDA, H200))
    assert not any("nvidia" in arg for arg in cpu) and cpu[-1] == CPU
    binds = [cuda[i + 1] for i, arg in enumerate(cuda) if arg == "--dev-bind"]
    assert binds == [str(dev / "nvidiactl"), str(dev / "nvidia-uvm"), str(dev / "nvidia0")]  # never nvidia1
    assert cuda[-2:] == ["2", CUDA]
    assert "CUDA_VISIBLE_DEVICES" not in scorer_env(2)
    assert scorer_env(2, Scoring(CUDA, H200))["CUDA_VISIBLE_DEVICES"] == H200.uuid


@pytest.mark.bwrap
def test_the_child_refuses_a_provider_it_does_not_have_rather_than_fall_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_nodes(tmp_path, monkeypatch)
    checked = inspect_bytes(models.threshold_model().SerializeToString())
    images = np.zeros((2, 16, 16), np.float32)
    assert score_checked(checked, images).shape == (2, 1, 16, 16)
    with pytest.raises(ScoringError, match="provider CUDAExecutionProvider is not available here"):
        score_checked(checked, images, scoring=Scoring(CUDA, H200))
