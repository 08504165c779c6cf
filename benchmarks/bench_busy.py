"""Device use: how much of a short ``segfactory run`` the tickets spend training, and the CPU it gets.

Runs ``segfactory run --profile demo`` (on a fresh demo home in a temporary folder unless
``--home`` names an initialised one) as a child process and prints, as ratios of that one run:

- **training share**: the union of the intervals in which at least one ticket's sandbox was
  training (each ``ticket_attempt`` audit record ends one, ``duration_s`` long), over the run's
  wall time;
- **CPU utilisation**: user + system time of the run and every process it waited for (its sandboxes
  under bwrap; docker containers are not its children and are not counted) over wall x cores;
- **device-seconds over wall**: what the run charged its budget (the sum of its tickets' sandbox
  time) over its wall time; above 1 when tickets train at once.

Set-up (``init``) is outside every figure. On a shared machine the figures move with the others'
load; the machine's load average at start and end is printed with them.

    .venv/bin/python benchmarks/bench_busy.py [--home HOME] [--budget 3m] [--wall 6m] [--concurrency auto]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.scheduler import host_cores  # noqa: E402


def segfactory(*args: str) -> list[str]:
    return [sys.executable, "-m", "segfactory", *args]


def timed_run(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, user + system CPU seconds of the child and all it waited for, stdout)."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(command, stdout=out, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, stdout


def training_intervals(home: Path, run_id: str) -> list[tuple[float, float]]:
    """(start, end) of every sandbox attempt of the run, from its audit records."""
    spans = []
    for line in (home / "audit" / "log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("run_id") == run_id and record.get("event") == "ticket_attempt":
            end = float(record["ts"])
            spans.append((end - float(record["payload"]["duration_s"]), end))
    return spans


def union_seconds(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="an initialised demo home (default: a fresh one)")
    parser.add_argument("--budget", default="3m", help="device time of the run")
    parser.add_argument("--wall", default="6m", help="wall limit of the run")
    parser.add_argument("--concurrency", default="auto")
    parser.add_argument("--backend", default="bwrap")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-busy-") as tmp:
        home = args.home or Path(tmp) / "home"
        if args.home is None:
            subprocess.run(
                segfactory("init", "--profile", "demo", "--home", str(home), "--json"),
                check=True,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
            )
        load_before = os.getloadavg()[0]
        command = segfactory(
            "run", "--profile", "demo", "--home", str(home), "--budget", args.budget, "--wall", args.wall,
            "--concurrency", args.concurrency, "--backend", args.backend, "--json",
        )  # fmt: skip
        wall, cpu, stdout = timed_run(command)
        summary = json.loads(stdout.strip().splitlines()[-1])
        training = union_seconds(training_intervals(home, summary["run_id"]))
        record = json.loads((home / "runs" / summary["run_id"] / "run.json").read_text())
    cores, device = host_cores(), float(summary["device_seconds"])
    lines = [
        f"run {summary['run_id']}: {summary['tickets_run']} tickets, concurrency {record['concurrency']} "
        f"({record.get('concurrency_requested')}), {device:.0f} device-s in {wall:.0f} s wall on {cores} "
        f"cores; load average {load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end",
        f"training share (>= 1 ticket training) / wall: {training:.0f} / {wall:.0f} = {training / wall:.2f}",
        f"CPU utilisation (user+sys) / (wall x cores): {cpu:.0f} / ({wall:.0f} x {cores}) = "
        f"{cpu / (wall * cores):.2f}",
        f"device-seconds / wall: {device:.0f} / {wall:.0f} = {device / wall:.2f}",
    ]
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
