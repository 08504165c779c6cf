"""benchmarks/bench_gpu.py, the GPU check's benchmark, by its specification on the CPU: the bf16
peak table is matched most specific first, and the whole measurement runs and reports its shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_gpu  # noqa: E402


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H200", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L40", 181.0),
        ("NVIDIA L4", 121.0),
        ("Tesla T4", None),
    ],
)
def test_the_bf16_peak_is_matched_most_specific_first(name: str, peak: float | None) -> None:
    assert bench_gpu.bf16_peak(name) == peak


def test_on_the_cpu_it_measures_training_and_scoring_and_prints_one_object(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        bench_gpu.main(
            ["--device", "cpu", "--steps", "1", "--batch", "2", "--size", "32", "--images", "4", "--json"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    train, score = out["training"], out["scoring"]
    assert train["images_per_s"] > 0 and train["gflop_per_step"] > 0 and train["bf16_peak_tflops"] is None
    assert train["model"].startswith("unet-plain (4 stages")  # 32 px: 32, 16, 8, 4
    assert score["images"] == 4 and score["gate_provider"] == "CPUExecutionProvider"
    assert score["max_abs_diff"] < 1e-4  # the confined scorer and bare onnxruntime agree


def test_the_summary_block_states_an_unknown_peak() -> None:
    train = {
        "device": "cpu (2 cores)",
        "model": "unet-plain",
        "batch": 2,
        "size": 32,
        "steps": 1,
        "images_per_s": 5.0,
        "gflop_per_step": 1.0,
        "achieved_tflops": 0.01,
        "bf16_peak_tflops": None,
        "share_of_peak": None,
        "peak_memory_mib": None,
    }
    score = {
        "images": 4,
        "gate_seconds": 1.0,
        "gate_provider": "CPUExecutionProvider",
        "bare_seconds": 0.1,
        "bare_provider": "CPUExecutionProvider",
        "gate_over_bare": 10.0,
        "max_abs_diff": 0.0,
    }
    block = bench_gpu.summary_block(train, score, (0.5, 0.5, 0.5))
    assert block.startswith("== bench_gpu summary ==") and "bf16 peak of this device: unknown" in block
