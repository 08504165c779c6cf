"""Sandbox start-up overhead: a trivial command in each backend against a bare subprocess.

Prints, per command (``true``, ``python -c pass``), the median wall time of REPS runs for a bare
``subprocess.run`` and for each backend's full ``run`` (session set-up, decoys, watch, cgroups,
capture, teardown), and the ratio to the bare run measured in the same process.
Usage: python benchmarks/bench_sandbox.py [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, as a script
from sandbox import SandboxSpec, get_backend  # noqa: E402
from segfactory.errors import SandboxError  # noqa: E402

REPS = 10  # runs per (command, backend); the median is reported
COMMANDS = {"true": ["true"], "python -c pass": ["python", "-c", "pass"]}


def _median_s(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up (image build, page cache)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=REPS)
    reps = parser.parse_args().reps
    workspace = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    for label, argv in COMMANDS.items():
        bare_argv = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
        bare = _median_s(lambda a=bare_argv: subprocess.run(a, check=True), reps)  # type: ignore[misc]
        sys.stdout.write(f"{label:16s} bare subprocess   {bare * 1000:8.1f} ms   ratio 1.00\n")
        for name in ("bwrap", "docker"):
            backend = get_backend(name)
            spec = SandboxSpec(command=argv, workspace=workspace, timeout_s=60)
            try:
                backend.check_available()
            except SandboxError as exc:
                sys.stdout.write(f"{label:16s} {name:17s} skipped: {exc}\n")
                continue
            took = _median_s(lambda b=backend, s=spec: b.run(s), reps)  # type: ignore[misc]
            sys.stdout.write(f"{label:16s} {name:17s} {took * 1000:8.1f} ms   ratio {took / bare:6.2f}\n")


if __name__ == "__main__":
    main()
