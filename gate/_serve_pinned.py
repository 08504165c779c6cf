"""Entry point of the gate service when it runs from its pinned copy.

Started by ``segfactory gate serve`` as ``python -I -c <boot>`` with the pinned directory first
on ``sys.path``. It verifies the copy and the loaded modules, refuses service (exit 3, with an
audit event in the ledger) on any mismatch, and re-verifies before every verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_PIN_MISMATCH = 3


def boot_code(pinned: Path) -> str:
    """The ``-c`` program that puts the copy first on ``sys.path`` and runs ``main``."""
    return (f"import sys; sys.path.insert(0, {str(pinned)!r}); "
            "from gate._serve_pinned import main; sys.exit(main(sys.argv[1:]))")


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gate-pinned")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--pinned", type=Path, required=True)
    parser.add_argument("--win-rule", type=Path, required=True)
    parser.add_argument("--socket", type=Path)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pad-quantum", type=float, required=True)
    parser.add_argument("--token-env", default="SEGFACTORY_GATE_TOKEN")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    import os

    from gate.core import Gate
    from gate.pinned import PinError, verify
    from gate.service import serve
    from segfactory.errors import GateError, SegfactoryError

    args = _args(argv)
    gate = Gate(args.home / "vault", win_rule_path=args.win_rule, home_root=args.home)
    try:
        verify(args.pinned)
    except PinError as exc:
        gate.ledger.queue_event("gate.pin_mismatch", {"reason": str(exc), "when": "start"})
        sys.stderr.write(f"segfactory: error: gate refuses service: {exc}\n")
        return EXIT_PIN_MISMATCH

    def integrity() -> None:
        try:
            verify(args.pinned)
        except PinError as exc:
            gate.ledger.queue_event("gate.pin_mismatch", {"reason": str(exc), "when": "verdict"})
            raise GateError(f"pinned code mismatch: {exc}") from None

    gate.integrity_check = integrity
    try:
        serve(gate, args.socket, args.host, args.port, os.environ.get(args.token_env) or None, args.pad_quantum)
    except SegfactoryError as exc:
        sys.stderr.write(f"segfactory: error: {exc}\n")
        return 2
    return 0
