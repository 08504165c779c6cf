"""Benchmark: a confirm verdict against bare onnxruntime inference over the same images.

For the demo profile's confirm tier (400 images, 64x64) and for 2,000 images, it times
``Gate.submit`` in-process (intake, confined bwrap scorer, metrics, seeded paired bootstrap,
ledger; no padding quantum, which the service adds on top) and bare in-process onnxruntime
inference of the same candidate over the same images, and prints the ratio (target <= 1.3).
The same images are the tier's images plus the win rule's perturbed copies of them
(``robust.perturbations``), since a verdict scores all of them.
"warm" means the current best's probabilities are already cached by the gate (every verdict
after the first on a tier version); "cold" includes scoring the best too.

    .venv/bin/python benchmarks/bench_gate.py [--model unet-mobilenetv3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gate.core import Gate  # noqa: E402
from gate.scorer import BATCH_IMAGES, THREADS  # noqa: E402
from gate.setup import export_classical_baseline, init_gate  # noqa: E402
from gate.win_rule import load_win_rule, perturbed_views  # noqa: E402
from synthetic.splits import read_split  # noqa: E402
from synthetic.tiers import build_tier  # noqa: E402


def bare_ort(model: Path, images: np.ndarray) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    start = time.perf_counter()
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    for i in range(0, len(images), BATCH_IMAGES):
        session.run(["prob"], {"image": images[i : i + BATCH_IMAGES, None]})
    return time.perf_counter() - start


def verdict_time(gate: Gate, model: Path, ticket: str) -> float:
    gate.ledger._db.execute("DELETE FROM verdict_cache")
    start = time.perf_counter()
    outcome = gate.submit(model.read_bytes(), ticket)
    elapsed = time.perf_counter() - start
    assert outcome.verdict.verdict.value in ("WIN", "NO_WIN"), outcome.reason
    return elapsed


def run(n: int, size: int, model: Path, repeats: int, work: Path) -> None:
    home = work / f"home-{n}"
    build_tier(home / "vault", "confirm-a", n, size)
    build_tier(home / "vault", "confirm-b", 16, size)
    baseline = export_classical_baseline(work / f"classical-{size}.onnx", size)
    init_gate(home, baseline)
    gate = Gate(home / "vault", home_root=home)
    split = read_split(next((home / "vault" / "tiers" / "confirm-a").glob("v*")))
    rule, _ = load_win_rule()
    views = perturbed_views(np.asarray(split.images), np.asarray(split.masks), rule)
    images = np.ascontiguousarray(
        np.concatenate([split.images, *(x for x, _ in views)])
    )  # what the verdict scores
    cold = verdict_time(gate, model, f"cold-{n}")
    warm = min(verdict_time(gate, model, f"warm-{n}-{i}") for i in range(repeats))
    bare = min(bare_ort(model, images) for _ in range(repeats))
    sys.stdout.write(
        f"n={n:5d} {size}x{size}: bare ort {bare:7.3f}s | gate verdict warm {warm:7.3f}s "
        f"(ratio {warm / bare:5.2f}) | cold {cold:7.3f}s (ratio {cold / bare:5.2f}, scores best too)\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--model", default="unet-mobilenetv3", help="vision preset to export as the candidate"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from vision.export import export_onnx
    from vision.models import build_model

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = Path(export_onnx(build_model(args.model), work / "candidate.onnx", (64, 64)))
        sys.stdout.write(f"candidate {args.model}; scorer threads {THREADS}; batch {BATCH_IMAGES}\n")
        run(400, 64, model, args.repeats, work)  # the demo profile's confirm tier
        run(2000, 64, model, args.repeats, work)


if __name__ == "__main__":
    main()
