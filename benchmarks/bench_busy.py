"""Device use: how much of a short ``segfactory run`` the tickets spend training, and the CPU it gets.

Runs ``segfactory run --profile demo`` (on a fresh demo home in a temporary folder unless
``--home`` names an initialised one) as a child process and prints, as ratios of that one run:

- **training share**: the union of the intervals in which at least one ticket's sandbox was
  training (each ``ticket_attempt`` audit record ends one, ``duration_s`` long), over the run's
  wall time;
- **CPU utilisation**: user + system time of the run and every process under it (its gate, its
  bwrap sandboxes; docker containers are not its descendants and are not counted), sampled from
  /proc, over wall x cores;
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
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.scheduler import host_cores  # noqa: E402

SAMPLE_S = 0.5  # how often the run's process tree is read for its CPU time


def segfactory(*args: str) -> list[str]:
    return [sys.executable, "-m", "segfactory", *args]


def timed_run(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, user + system CPU seconds of the child and every descendant, stdout).

    Descendants are sampled every ``SAMPLE_S`` from /proc (``psutil``) and each counted at the last
    CPU time seen: the sandboxes' processes are not reaped by their parents the way ``wait4``'s
    rusage needs (bwrap's own pid 1 reaps them), so the child's rusage alone misses them. A process
    that ended between two samples loses at most its last ``SAMPLE_S``."""
    import psutil

    seen: dict[tuple[int, float], float] = {}
    done = threading.Event()

    def sample(root: psutil.Process) -> None:
        while not done.is_set():
            try:
                family = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in family:
                try:
                    times = proc.cpu_times()
                    seen[(proc.pid, proc.create_time())] = times.user + times.system
                except psutil.Error:
                    continue
            done.wait(SAMPLE_S)

    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(command, stdout=out, cwd=REPO)
        sampler = threading.Thread(target=sample, args=(psutil.Process(proc.pid),), daemon=True)
        sampler.start()
        code = proc.wait()
        wall = time.monotonic() - start
        done.set()
        sampler.join()
        out.seek(0)
        stdout = out.read().decode()
    if code != 0:
        raise SystemExit(f"{' '.join(command[2:])} exited {code}")
    return wall, sum(seen.values()), stdout


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
