"""Run overhead: a finished ``segfactory run`` against the device time its tickets spent.

Reads ``runs/<id>/run.json``, ``tickets/*/outcome.json`` and the audit log of a finished run
and prints, per ticket and for the run, the wall time over the device time (the sandbox's own
wall time, what the budget charges). The ratio says how much of a run the host spends outside
training: sandbox verify, the baseline analysis, the manifest, copy-out, confined dev scoring,
gate queries, the milestone and the report.
Usage: python benchmarks/bench_run.py --home HOME --run RUN
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--run", required=True)
    args = parser.parse_args()
    run_dir = args.home / "runs" / args.run
    record = json.loads((run_dir / "run.json").read_text())
    device = wall = 0.0
    for outcome_file in sorted((run_dir / "tickets").glob("*/outcome.json")):
        outcome = json.loads(outcome_file.read_text())
        device += outcome["device_seconds"]
        wall += outcome["wall_seconds"]
        ratio = outcome["wall_seconds"] / max(outcome["device_seconds"], 1e-9)
        sys.stdout.write(
            f"{outcome['ticket_id']}: {outcome['status']} device {outcome['device_seconds']:.1f} s, "
            f"ticket wall {outcome['wall_seconds']:.1f} s, ratio {ratio:.2f}\n"
        )
    total = record["finished_at"] - record["started_at"]
    sys.stdout.write(f"tickets: wall {wall:.1f} s / device {device:.1f} s = {wall / max(device, 1e-9):.2f}\n")
    sys.stdout.write(
        f"run: wall {total:.1f} s / device {device:.1f} s = {total / max(device, 1e-9):.2f} "
        f"(budget {record['caps']['wall_seconds']:.0f} s wall)\n"
    )


if __name__ == "__main__":
    main()
