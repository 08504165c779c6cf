"""Does a profile's base recipe learn, seed after seed? (target: at least 19 of 20 seeds)

A base recipe that finds no void on some seeds makes every ticket built on it a lottery: a
screen that scored 0.0 says nothing about its change. Each named config trains its own epochs
from fresh weights under ``--seeds`` seeds (1, 2, ... N) on the same data, one core each, two
at a time on a 2-core machine, and the benchmark counts the seeds whose last-epoch dev object F1
reaches ``LEARNED_F1`` (the classical detector scores about 0.15 on this data; a collapsed model
0.0). Its data: a synthetic split of 1,536 train and 256 dev images of 64 px (fixed seeds); each
config trains on its own ``max_train_images`` of them, as its profile's tickets do.

    .venv/bin/python benchmarks/bench_recipes.py [--seeds 20] [--workers 2] [CONFIG.yaml ...]

Without configs it measures the demo's and the CPU default profile's base configs. Prints, per
config, the seeds that learned, the median and the lowest dev object F1, and seconds per run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import yaml  # noqa: E402

from synthetic import generate  # noqa: E402
from vision.config import parse_config  # noqa: E402
from vision.train import train  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIGS = ("configs/run-demo.yaml", "configs/run-default-cpu.yaml")
LEARNED_F1 = 0.3  # dev object F1 at the last epoch: at least this is "learned"
TARGET = 19 / 20
N_TRAIN, N_DEV, SIZE = 1536, 256, 64  # the CPU default trains on 1,536, the demo on 768


def one_run(config_path: str, seed: int, data: str, out: str) -> tuple[float, float]:
    """(last-epoch dev object F1, seconds) of one fresh-weights training under ``seed``."""
    raw = yaml.safe_load((REPO / config_path).read_text())
    raw.update(seed=seed, threads=1, device="cpu")
    started = time.perf_counter()
    result = train(parse_config(raw, config_path), Path(data), Path(out))
    return float(result.dev.get("object_f1", 0.0)), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "v"
        generate(N_TRAIN, SIZE, seed=11, workers=1).write(data / "train")
        generate(N_DEV, SIZE, seed=12, workers=1).write(data / "dev")
        with ProcessPoolExecutor(args.workers) as pool:
            for config in args.configs:
                jobs = [
                    pool.submit(one_run, config, seed, str(data), f"{tmp}/{Path(config).stem}-{seed}")
                    for seed in range(1, args.seeds + 1)
                ]
                runs = [job.result() for job in jobs]
                f1s = [f1 for f1, _ in runs]
                learned = sum(f1 >= LEARNED_F1 for f1 in f1s)
                ok = learned >= TARGET * args.seeds
                sys.stdout.write(
                    f"bench_recipes: {config}: learned in {learned} of {args.seeds} seeds "
                    f"(dev object F1 >= {LEARNED_F1}; target {TARGET:.0%}) {'OK' if ok else 'MISSED'}\n"
                    f"  dev object F1 median {statistics.median(f1s):.3f}, lowest {min(f1s):.3f}; "
                    f"{statistics.median(s for _, s in runs):.0f} s a run\n"
                    f"  per seed: {' '.join(f'{f1:.2f}' for f1 in f1s)}\n"
                )
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
