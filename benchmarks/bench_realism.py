"""All realism statistics for 2,000 synthetic against 2,000 stand-in images (target <= 30 s).

Measures ``analysis.realism.report.compare`` without the classifier (per-slice void sizes and
contrast, noise power spectra, edge profiles, KS tests, MMD with 200 permutations), then the
classifier two-sample test on its own (its training time reported separately). The baseline,
measured in the same run, is a plain per-image, per-void loop (``ndimage.label`` and a ring
mean and a Euclidean edge profile per void, the straightforward way) on a 200-image subset,
extrapolated; it covers only the void statistics, a fraction of what the vectorised pass does.

    .venv/bin/python benchmarks/bench_realism.py [--n 2000] [--size 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_S = 30.0  # all statistics for 2,000 vs 2,000 within this
BASELINE_SUBSET = 200  # images the per-void loop runs on (then extrapolated)


def _per_void_loop(images: np.ndarray, masks: np.ndarray) -> list[float]:
    from scipy import ndimage

    out = []
    for image, mask in zip(images, masks, strict=True):
        labels, count = ndimage.label(mask, structure=np.ones((3, 3)))
        for k in range(1, count + 1):
            inside = labels == k
            ring = ndimage.binary_dilation(inside, iterations=2) & (labels == 0)
            v, r = float(image[inside].mean()), float(image[ring].mean()) if ring.any() else 0.0
            signed = ndimage.distance_transform_edt(~inside) - ndimage.distance_transform_edt(inside)
            profile = [
                float(image[np.round(signed) == d].mean()) / max(r, 1e-9) - 1
                for d in range(-4, 5)
                if (np.round(signed) == d).any()
            ]
            out.append(abs(v - r) / max(v + r, 1e-9) + 0.0 * sum(profile))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    from analysis.realism._tests import c2st
    from analysis.realism.report import compare
    from analysis.realism.standin import stand_in_params
    from synthetic import generate

    out = sys.stdout.write
    out(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n")
    syn = generate(args.n, args.size, 1)
    real = generate(args.n, args.size, 2, stand_in_params())
    started = time.perf_counter()
    report, _, _ = compare(syn.images, syn.masks, real.images, real.masks, classifier=False)
    stats_s = time.perf_counter() - started
    out(
        f"realism statistics, {args.n} vs {args.n} at {args.size}px: {stats_s:.2f} s "
        f"(target {TARGET_S:.0f} s: {'PASS' if stats_s <= TARGET_S else 'FAIL'}), "
        f"{report.voids.n_synthetic} + {report.voids.n_real} voids\n"
    )
    started = time.perf_counter()
    _per_void_loop(syn.images[:BASELINE_SUBSET], syn.masks[:BASELINE_SUBSET])
    loop_s = (time.perf_counter() - started) * (2 * args.n / BASELINE_SUBSET)
    out(
        f"baseline per-void loop (contrast + edge profile only), extrapolated to both sets: {loop_s:.2f} s; "
        f"ratio baseline / vectorised (all statistics) = {loop_s / stats_s:.1f}x\n"
    )
    started = time.perf_counter()
    result = c2st(syn.images, real.images)
    acc = result.accuracy
    out(
        f"classifier two-sample test (excluded from the target): training {result.train_seconds:.2f} s, "
        f"total {time.perf_counter() - started:.2f} s, held-out accuracy {acc.estimate:.3f} "
        f"[{acc.low:.3f}, {acc.high:.3f}] on {result.n_held_out} images\n"
    )


if __name__ == "__main__":
    main()
