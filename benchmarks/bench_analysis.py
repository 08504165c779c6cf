"""Benchmark: analysing a 2,000-image dev set vs evaluating it (target: ratio <= 2).

Both sides run the same real ONNX model through onnxruntime on the same generated dev split:
the baseline is ``vision.evaluate.evaluate`` (what ``segfactory evaluate`` does); the analysis
is what ``segfactory analyse`` does without a learning curve: inference, error typing, slices
with halves and BH, the cleanlab label estimate, recommendations, plots, crops and the report.
Module imports (cleanlab, matplotlib, vision) happen before either clock starts.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

N_IMAGES = 2000
SIZE = 64
TARGET_RATIO = 2.0


def planted(n_runs: int) -> None:
    """Recovery and false-finding rates over ``n_runs`` randomly drawn planted-cause runs."""
    import numpy as np

    from analysis.planted import draw_cause, rates, run_planted
    from analysis.report import Evaluated
    from analysis.toy import HistogramTrainer, toy_split

    train, dev = toy_split(400, 40, seed=1), toy_split(400, 40, seed=2)
    trainer = HistogramTrainer()
    refs: dict[int, tuple[Evaluated, Evaluated]] = {}

    def unplanted(seed: int) -> tuple[Evaluated, Evaluated]:
        if seed not in refs:
            model = trainer.fit(train.images, train.masks, seed=seed)
            refs[seed] = (
                Evaluated(dev, model.predict(dev.images)),
                Evaluated(train, model.predict(train.images)),
            )
        return refs[seed]

    results = []
    for k in range(n_runs):
        seed = 1 + k % 3  # three training seeds, each with its own cached reference and seed-noise band
        result, _ = run_planted(
            draw_cause(np.random.default_rng(1000 + k)),
            trainer,
            train,
            dev,
            unplanted(seed)[0],
            seed=seed,
            reference_train=unplanted(seed)[1],
            seed_reference=unplanted(seed + 100)[0],
        )
        results.append(result)
        sys.stdout.write(
            f"  run {k}: planted {result.cause.kind} ({result.cause.magnitude}) -> named {result.named}\n"
        )
    for name, iv in rates(results).items():
        sys.stdout.write(f"planted causes: {name} rate {iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}]\n")


def main() -> int:
    from analysis.render import write_report
    from analysis.report import Evaluated, analyse
    from analysis.toy import contrast_onnx
    from synthetic import generate
    from synthetic.splits import read_split
    from vision.evaluate import evaluate
    from vision.onnx_infer import predict

    logging.basicConfig(level=logging.WARNING)
    import cleanlab.segmentation.filter  # noqa: F401  (module imports are excluded on both sides)
    import matplotlib.pyplot  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(N_IMAGES, SIZE, seed=5).write(root / "dev")
        model = contrast_onnx(root / "model.onnx", 40.0)
        t0 = time.perf_counter()
        evaluate(model, root / "dev")
        t_eval = time.perf_counter() - t0
        t0 = time.perf_counter()
        split = read_split(root / "dev")
        dev = Evaluated(split, predict(model, split.images))
        report, errors = analyse(dev)
        write_report(report, dev, errors, root / "analysis")
        t_analyse = time.perf_counter() - t0
    ratio = t_analyse / t_eval
    sys.stdout.write(
        f"bench_analysis: {N_IMAGES} images {SIZE}px: evaluate {t_eval:.2f} s, "
        f"analyse {t_analyse:.2f} s, ratio {ratio:.2f} (target <= {TARGET_RATIO})\n"
    )
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--planted":
        planted(int(sys.argv[2]))
        raise SystemExit(0)
    raise SystemExit(main())
