"""Generator throughput at 96x96 (masks, metadata and hashes included).

Prints images/s for: the plain-numpy reference loop (the baseline, one process), the fast
engine in one process, the fast engine on every core, and (with --full) the whole command
``segfactory data generate --n 10000 --size 96`` including process start and writing. Wall and
CPU figures are both printed: on a shared machine the wall figure depends on other load, so
compare CPU figures (images per CPU-second, CPU-seconds) there.

    .venv/bin/python benchmarks/bench_generate.py [--full]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from synthetic import generate  # noqa: E402
from synthetic._kernels import warm_up  # noqa: E402

SIZE = 96


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(label: str, n: int, **kwargs: object) -> float:
    wall, cpu = time.perf_counter(), cpu_seconds()
    generate(n, SIZE, seed=7, **kwargs)  # type: ignore[arg-type]
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    rate = n / wall
    sys.stdout.write(f"{label:<34} {rate:9.0f} images/s wall   {n / cpu:9.0f} images/CPU-s\n")
    return rate


def whole_command(runs: int = 5) -> None:
    """The CLI end to end, process start and writing included: wall and CPU (user + system), each
    run into a fresh folder that is deleted after it; the median run is the figure."""
    walls = []
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            started, cpu = time.perf_counter(), cpu_seconds()
            command = [sys.executable, "-m", "segfactory", "data", "generate", "--out", f"{tmp}/s"]
            command += ["--n", "10000", "--size", str(SIZE), "--seed", "1", "--json"]
            subprocess.run(command, cwd=REPO, check=True, capture_output=True)
            wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        walls.append(wall)
        sys.stdout.write(f"whole command, run {run + 1}: {wall:.2f} s wall, {cpu:.2f} CPU-s\n")
    sys.stdout.write(
        f"whole command, n=10000 {SIZE}x{SIZE}: median {statistics.median(walls):.2f} s wall of {runs} runs "
        f"(target: <= 4 s wall on 2 idle cores, process start included)\n"
    )


def main() -> None:
    warm_up()
    generate(20, SIZE, seed=0, workers=1, engine="numpy")
    cores = os.cpu_count() or 1
    sys.stdout.write(f"load average {os.getloadavg()[0]:.1f} on {cores} cores\n")
    base = measure("baseline: numpy reference, 1 proc", 600, workers=1, engine="numpy")
    one = measure("fast engine, 1 process", 1200, workers=1)
    every = measure(f"fast engine, {cores} processes", 4000, workers=cores)
    sys.stdout.write(
        f"ratio fast/baseline (1 process): {one / base:.2f}x; all cores/baseline: {every / base:.2f}x\n"
    )
    if "--full" in sys.argv:
        whole_command()


if __name__ == "__main__":
    main()
