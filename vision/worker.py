"""Sandbox entry: ``python -m vision.worker --config /work/config.yaml --data /data --out /work/out``.

``--init-from /init/model.safetensors``: start from a parent's weights (strict; fresh schedule).

Reads only the given paths, opens no network connection and never touches a factory home.
Exit status 0 when the run is usable, 3 when it finished but is not usable, 2 on bad input.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from segfactory.errors import SegfactoryError
from vision.config import load_config

EXIT_NOT_USABLE = 3


def seconds_since_exec() -> float:
    """How long ago the kernel started this process: the interpreter's start-up before ``main``.

    /proc gives the start in clock ticks (10 ms here); 0.0 where it cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started)


def main(argv: list[str] | None = None) -> int:
    entered, startup_s = time.perf_counter(), seconds_since_exec()
    parser = argparse.ArgumentParser(prog="vision.worker", description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--init-from", type=Path, default=None, help="start from this checkpoint's weights")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    try:
        config = load_config(args.config)  # a bad config fails before torch is imported
        # OpenMP threads sleep rather than spin while they wait: on a shared host a spinning
        # thread burns the core its partner needs (a demo ticket took 133 CPU-s at load 8,
        # against ~50 idle). libgomp reads this when torch loads it, so set it first.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from vision.train import train  # deferred: torch reads OMP_WAIT_POLICY when it loads, set just above

        imports_s = time.perf_counter() - entered
        result = train(
            config,
            args.data,
            args.out,
            progress=False,
            resume=args.resume,
            init_from=args.init_from,
            timings={"startup_s": startup_s, "imports_s": imports_s},  # the fixed cost of a fresh process
        )
    except SegfactoryError as exc:
        sys.stderr.write(f"vision.worker: error: {exc}\n")
        return exc.exit_code
    return 0 if result.usable else EXIT_NOT_USABLE


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown.

    Everything the run writes is closed by the time ``main`` returns; with torch loaded, tearing
    the interpreter down took 0.8-0.9 s (measured, idle), paid by every ticket for nothing. Child
    processes (nnU-Net's data loaders) get the normal exit, whose finalisers stop them."""
    processes = sys.modules.get("multiprocessing")
    if processes is not None and processes.active_children():
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
