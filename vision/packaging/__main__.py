"""Sandbox entry: ``python -m vision.packaging --members /members --data /data --out /work/out --spec S``.

``--members`` holds ``0.onnx``, ``1.onnx``, ... (the host's staged copies, read-only); ``--data``
a dataset version whose ``train/`` is the only split read. Exit 0 when ``model.onnx`` was
written, the error's exit status (one line on stderr, nothing written) otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import yaml

from segfactory.errors import SegfactoryError, UsageError
from vision.packaging.build import package
from vision.packaging.spec import PackageSpec


def member_files(folder: Path) -> list[Path]:
    """``<i>.onnx`` in index order; anything else in the folder is an error."""
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    wanted = [f"{i}.onnx" for i in range(len(names))]
    if not names or names != sorted(wanted):
        raise UsageError(f"{folder} must hold 0.onnx, 1.onnx, ... and nothing else; found {names[:8]}")
    return [folder / name for name in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vision.packaging", description=__doc__)
    parser.add_argument("--members", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--spec", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        spec = PackageSpec.model_validate(yaml.safe_load(args.spec.read_text()) or {})
        package(member_files(args.members), args.data, args.out, spec)
    except SegfactoryError as exc:
        sys.stderr.write(f"vision.packaging: error: {exc}\n")
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
