"""How long the command line takes to start: ``--help`` and one command's ``--help``.

The command line imports only the module of the command being run, and ``--help`` none. The
baseline, measured in the same run and in the same way, is a start that imports every command
module first (what ``--help`` would cost if it loaded them all, now that each command module
imports our own code at its top). Each case is a fresh interpreter; the median of ROUNDS runs,
the cases interleaved so that other load on the machine hits them alike.

    .venv/bin/python benchmarks/bench_cli.py [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUNDS_DEFAULT = 7
CASES = {
    "--help": "from cli import main; main(['--help'])",
    "evaluate --help": "from cli import main; main(['evaluate', '--help'])",
    "gate status --help": "from cli import main; main(['gate', 'status', '--help'])",
    "baseline: every command module, then --help": (
        "import importlib; from cli import COMMANDS, main\n"
        "for module, _ in COMMANDS.values(): importlib.import_module('cli.' + module)\n"
        "main(['--help'])"
    ),
}


def once(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS_DEFAULT
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(rounds):
        for name, code in CASES.items():
            times[name].append(once(code))
    median = {name: statistics.median(t) for name, t in times.items()}
    baseline = median["baseline: every command module, then --help"]
    sys.stdout.write(f"load average {os.getloadavg()[0]:.2f}; median of {rounds} fresh interpreters\n")
    for name, seconds in median.items():
        sys.stdout.write(f"{name:>45}: {seconds:.3f} s  (baseline / this = {baseline / seconds:.1f}x)\n")


if __name__ == "__main__":
    main()
