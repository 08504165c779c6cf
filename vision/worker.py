"""Sandbox entry: ``python -m vision.worker --config /work/config.yaml --data /data --out /work/out``.

Reads only the given paths, opens no network connection and never touches a factory home.
Exit status 0 when the run is usable, 3 when it finished but is not usable, 2 on bad input.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from segfactory.errors import SegfactoryError

EXIT_NOT_USABLE = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vision.worker", description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from vision.config import load_config

    try:
        config = load_config(args.config)  # a bad config fails before torch is imported
        # OpenMP threads sleep rather than spin while they wait: on a shared host a spinning
        # thread burns the core its partner needs (a demo ticket took 133 CPU-s at load 8,
        # against ~50 idle). libgomp reads this when torch loads it, so set it first.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from vision.train import train

        result = train(config, args.data, args.out, progress=False, resume=args.resume)
    except SegfactoryError as exc:
        sys.stderr.write(f"vision.worker: error: {exc}\n")
        return exc.exit_code
    return 0 if result.usable else EXIT_NOT_USABLE


if __name__ == "__main__":
    sys.exit(main())
