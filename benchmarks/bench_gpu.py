"""GPU throughput: training images per second, achieved TFLOP/s against the device's bf16 peak, and
the gate's verdict time against bare onnxruntime on the same images.

Training: the default profile's model (configs/run-default.yaml: nnU-Net's plain U-Net with deep
supervision, 96 px crops, batch 64) in the trainer's own step: bf16 autocast and channels_last on
CUDA, the configured SGD. FLOPs per step are counted once by ``torch.utils.flop_counter`` (forward
and backward); achieved TFLOP/s is that count times the timed steps over their time. The bf16
peak is the vendor's dense figure for the device name (``BF16_PEAK_TFLOPS``), or "unknown".

Scoring: the model exported to ONNX, then N images scored (a) by the gate's confined scorer (a
bwrap child, the provider the gate uses) and (b) by a bare onnxruntime session in this process on
the best provider this machine has. The ratio says what the gate's confinement and provider cost.

On a machine without CUDA it measures the same on the CPU (``--device cpu``, the default there) so
that the script and its summary are exercised everywhere; the figures are then CPU figures.
Usage: python benchmarks/bench_gpu.py [--device auto|cuda|cpu] [--steps N] [--batch B] [--size S]
                                     [--images N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, as a script

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "run-default.yaml"
# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s from the vendors' data sheets. Matched on
# the device name, most specific first.
BF16_PEAK_TFLOPS: list[tuple[str, float]] = [
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("GH200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10", 125.0),
    ("RTX 6000 Ada", 364.0),
    ("RTX 4090", 165.0),
    ("A6000", 155.0),
]


def bf16_peak(name: str) -> float | None:
    """The dense bf16 peak of a device by name; None when the table does not know it."""
    for key, peak in BF16_PEAK_TFLOPS:
        if key.lower() in name.lower():
            return peak
    return None


def pick(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu: --device cuda, but torch sees no CUDA device")
    return device


def build(device: str, batch: int, size: int) -> tuple[Any, Any, Any, Any]:
    """The default profile's model, optimiser and config on ``device``, at ``size`` px."""
    import torch

    from vision.config import load_config
    from vision.models import build_model
    from vision.plain_unet import stages_for
    from vision.train import make_optimizer

    config = load_config(CONFIG)
    config = config.model_copy(update={"batch_size": batch, "device": device})
    stages = stages_for(size)
    model = build_model(
        config.model.name, config.model.decoder_width, stages=stages, deep_supervision=config.deep_supervision
    ).to(device)
    if device == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model, make_optimizer(config, model), config, stages


def step_fn(model: Any, optim: Any, config: Any, device: str) -> Any:
    import contextlib

    import torch

    from vision.train import supervised_loss

    def step(x: Any, y: Any) -> None:
        optim.zero_grad(set_to_none=True)
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
        with ctx:
            loss = supervised_loss(config, model(x), y)
        loss.backward()
        optim.step()

    return step


def measure_training(device: str, steps: int, batch: int, size: int) -> dict[str, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model, optim, config, stages = build(device, batch, size)
    model.train()
    x = torch.rand(batch, 1, size, size, device=device)
    y = (torch.rand(batch, 1, size, size, device=device) > 0.97).float()
    if device == "cuda":
        x = x.contiguous(memory_format=torch.channels_last)
    step = step_fn(model, optim, config, device)
    with FlopCounterMode(display=False) as counter:
        step(x, y)
    flops_per_step = counter.get_total_flops()
    for _ in range(2):  # warm-up: cuDNN autotuning, allocator
        step(x, y)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    sync()
    elapsed = time.perf_counter() - start
    name = torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({os.cpu_count()} cores)"
    achieved = flops_per_step * steps / elapsed / 1e12
    peak = bf16_peak(name) if device == "cuda" else None
    return {
        "device": name,
        "model": f"{config.model.name} ({stages} stages, width {config.model.decoder_width})",
        "batch": batch,
        "size": size,
        "steps": steps,
        "seconds": round(elapsed, 3),
        "images_per_s": round(batch * steps / elapsed, 1),
        "gflop_per_step": round(flops_per_step / 1e9, 2),
        "achieved_tflops": round(achieved, 3),
        "bf16_peak_tflops": peak,
        "share_of_peak": None if peak is None else round(achieved / peak, 4),
        "peak_memory_mib": round(torch.cuda.max_memory_allocated() / 2**20) if device == "cuda" else None,
        "model_obj": model,
    }


def bare_providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def measure_scoring(model: Any, n_images: int, size: int) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort

    from gate.intake import inspect_model
    from gate.scorer import score_checked
    from vision.export import export_onnx

    images = np.random.default_rng(0).random((n_images, size, size), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = export_onnx(model.eval(), Path(tmp) / "model.onnx", (size, size))
        checked = inspect_model(path)
        score_checked(
            checked, images[:2]
        )  # warm: the child's start is part of each verdict, but not the first import
        start = time.perf_counter()
        gate_prob = score_checked(checked, images)
        gate_s = time.perf_counter() - start
        providers = bare_providers()
        session = ort.InferenceSession(str(path), providers=providers)
        session.run(["prob"], {"image": images[:2, None]})
        start = time.perf_counter()
        bare = np.concatenate(
            [session.run(["prob"], {"image": images[i : i + 64, None]})[0] for i in range(0, n_images, 64)]
        )
        bare_s = time.perf_counter() - start
    return {
        "images": n_images,
        "gate_seconds": round(gate_s, 3),
        "gate_provider": "CPUExecutionProvider",
        "bare_seconds": round(bare_s, 3),
        "bare_provider": session.get_providers()[0],
        "gate_over_bare": round(gate_s / bare_s, 2) if bare_s > 0 else None,
        "max_abs_diff": float(np.abs(gate_prob - bare).max()),
    }


def summary_block(train: dict[str, Any], score: dict[str, Any], load: tuple[float, float, float]) -> str:
    peak = (
        f"{train['achieved_tflops']:.2f} TFLOP/s of a {train['bf16_peak_tflops']:g} TFLOP/s bf16 peak "
        f"({100 * train['share_of_peak']:.1f}%)"
        if train["bf16_peak_tflops"]
        else f"{train['achieved_tflops']:.3f} TFLOP/s (bf16 peak of this device: unknown)"
    )
    return "\n".join(
        [
            "== bench_gpu summary ==",
            f"device            {train['device']}  (load average {load[0]:.2f})",
            f"model             {train['model']}, batch {train['batch']} of {train['size']} px",
            f"training          {train['images_per_s']:.1f} images/s over {train['steps']} steps; "
            f"{train['gflop_per_step']:.1f} GFLOP a step",
            f"achieved          {peak}",
            *(
                [f"peak memory       {train['peak_memory_mib']} MiB"]
                if train["peak_memory_mib"] is not None
                else []
            ),
            f"gate scoring      {score['images']} images in {score['gate_seconds']:.2f} s "
            f"({score['gate_provider']}, confined child)",
            f"bare onnxruntime  {score['bare_seconds']:.2f} s ({score['bare_provider']}); gate / bare "
            f"{score['gate_over_bare']}x; max |diff| {score['max_abs_diff']:.2e}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument(
        "--steps", type=int, default=None, help="timed training steps (default: 50 CUDA, 3 CPU)"
    )
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: 64 CUDA, 8 CPU)")
    parser.add_argument("--size", type=int, default=96, help="crop side in pixels")
    parser.add_argument(
        "--images", type=int, default=None, help="images scored (default: 2048 CUDA, 128 CPU)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    args = parser.parse_args(argv)
    device = pick(args.device)
    gpu = device == "cuda"
    steps = args.steps or (50 if gpu else 3)
    batch = args.batch or (64 if gpu else 8)
    train = measure_training(device, steps, batch, args.size)
    score = measure_scoring(train.pop("model_obj"), args.images or (2048 if gpu else 128), args.size)
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"training": train, "scoring": score, "load_average": load}, sort_keys=True))
    else:
        print(summary_block(train, score, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
