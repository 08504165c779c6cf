"""Scoring cost of a packaged model against one of its members, at demo size.

Members are the demo preset (``unet-mobilenetv3``, decoder width 16) exported untrained (their
cost does not depend on their weights); the packaged model averages ``--members`` of them over the
image and its flips, then applies the folded threshold and, for each ``--min-sizes`` entry, the
exact component-size filter. Each model scores the images of a demo confirm tier's size (400 of
64 px) with onnxruntime on one thread, as the gate's confined scorer does; the ratio is the
packaged model's time over one member's. The expectation without post-processing is about
members x views; the size filter adds (2m - 1)^2 window offsets of elementwise work.

Usage: python benchmarks/bench_package.py [--members K] [--flips h,v] [--min-sizes 1,2,3] [--n N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, as a script
import numpy as np  # noqa: E402

N_IMAGES, SIZE = 400, 64  # the demo profile's confirm tier
REPEATS = 3  # timed runs per model; the best is kept


def members(root: Path, k: int) -> list[Path]:
    import torch

    from vision.export import export_onnx
    from vision.models import build_model

    paths = []
    for index in range(k):
        torch.manual_seed(index)
        path = root / f"{index}.onnx"
        export_onnx(build_model("unet-mobilenetv3", 16), path, size=(SIZE, SIZE))
        paths.append(path)
    return paths


def best_time(model: bytes, images: np.ndarray) -> float:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for start in range(0, len(images), 128):
            session.run(["prob"], {"image": images[start : start + 128, None]})
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    from vision.packaging import PackageSpec
    from vision.packaging._members import load_members
    from vision.packaging.build import build

    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--flips", default="h")
    parser.add_argument("--min-sizes", default="1,2,3")
    parser.add_argument("--n", type=int, default=N_IMAGES)
    args = parser.parse_args()
    flips = [f for f in args.flips.split(",") if f]
    images = np.random.default_rng(0).random((args.n, SIZE, SIZE), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        paths = members(Path(tmp), args.members)
        single = best_time(paths[0].read_bytes(), images)
        loaded = load_members(paths)
        spec = PackageSpec(flips=flips)  # type: ignore[arg-type]
        lines = [f"one member: {single:.2f} s for {args.n} images of {SIZE} px (1 thread)"]
        for m in (int(v) for v in args.min_sizes.split(",")):
            packaged = build(loaded, spec, 0.45, m).SerializeToString()
            took = best_time(packaged, images)
            lines.append(
                f"{args.members} members x {1 + len(flips)} views, threshold folded, min size {m}: "
                f"{took:.2f} s, ratio {took / single:.2f}"
            )
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
