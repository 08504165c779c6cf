"""The CI planted-cause mix under different floating-point paths: does its outcome hold?

The CI test (tests/analysis/test_planted_vision.py) trains every model on one torch thread, which
is bit-exact from run to run on one machine, and its bar has no margin on recovery (4 of 6). A CI
machine with another CPU may take other kernels and sum in another order. Training on ``--threads``
threads per model changes the order of the reductions the same way, so this reruns the test's
exact mix (same seeds, same draws, same analysis) on another numeric path and prints the same
lines as the test. docs/analysis.md records what it printed.

About 22-25 minutes per thread count on 2 cores (one model at a time; measured with 2 and 3 threads).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="torch threads per model (the CI test uses 1)")
    ap.add_argument("--workers", type=int, default=1, help="models trained at a time")
    args = ap.parse_args(argv)

    from analysis.planted import NULL_KINDS, rate_lines, run_mix
    from analysis.planted_vision import VISION_RANGES, VisionTrainer, planted_config, planted_data
    from tests.analysis.test_planted_vision import MIX, NOISE_OFFSETS

    start = time.perf_counter()
    train, dev = planted_data()
    config = planted_config().model_copy(update={"threads": args.threads})
    trainer = VisionTrainer(config, images_per_epoch=len(train.images))
    runs = run_mix(
        MIX, trainer, train, dev, noise_offset=NOISE_OFFSETS, ranges=VISION_RANGES, workers=args.workers
    )
    results = [r for r, _ in runs]
    planted = [r for r in results if r.cause.kind not in NULL_KINDS]
    recovered = sum(r.recovered for r in planted)
    silent = all(
        r.n_findings == 0 and report.recommendations[0].action == "leave_it"
        for r, report in runs
        if r.cause.kind in NULL_KINDS
    )
    print(f"CI planted mix, {args.threads} torch thread(s) per model:\n  " + "\n  ".join(rate_lines(results)))
    print(
        f"recovered {recovered}/{len(planted)}; null runs silent: {silent}; "
        f"CI bar {'met' if silent and recovered >= 2 / 3 * len(planted) else 'MISSED'}; "
        f"{time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
