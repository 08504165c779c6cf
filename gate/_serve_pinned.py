"""Entry point of the gate service when it runs from its pinned copy.

Started by ``segfactory gate serve`` as ``python -I -B -c <boot>`` with the pinned directory
first on ``sys.path`` and bytecode writing off (the copy stays byte-identical and read-only).
It verifies that the copy is the one the ledger pinned, its files and the loaded modules,
refuses service (exit 3, with an audit event in the ledger) on any mismatch, and re-verifies
before every verdict and milestone. Before it listens it fixes its answer time (``gate.calibrate``);
when it cannot, or a person's override is below the measured verdict time, it exits 2 with why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gate.calibrate import parse_override
from gate.core import Gate
from gate.pinned import META_PINNED, PinError, verify
from gate.service import serve
from gate.users import vault_problem
from segfactory.errors import GateError, SegfactoryError
from segfactory.handover import die_with_parent

EXIT_PIN_MISMATCH = 3
EXIT_UNSAFE_VAULT = 4  # a vault of another user, or reached through a path others control


def boot_code(pinned: Path) -> str:
    """The ``-c`` program that puts the copy first on ``sys.path`` and runs ``main``."""
    return (
        f"import sys; sys.dont_write_bytecode = True; sys.path.insert(0, {str(pinned)!r}); "
        "from gate._serve_pinned import main; sys.exit(main(sys.argv[1:]))"
    )


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gate-pinned")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--pinned", type=Path, required=True)
    parser.add_argument("--win-rule", type=Path, required=True)
    parser.add_argument("--socket", type=Path)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--answer-time")  # an override as given (600, 2x); absent: calibrated
    parser.add_argument("--answer-source", choices=("flag", "env"), default="flag")
    parser.add_argument("--token-env", default="SEGFACTORY_GATE_TOKEN")
    parser.add_argument("--agent-token-env", default="SEGFACTORY_GATE_AGENT_TOKEN")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    import os

    die_with_parent()  # the credentials changed on the way here, which cleared the death signal
    args = _args(argv)
    problem = vault_problem(args.home / "vault")
    if problem is not None:  # checked again here, as the user that serves, in its own namespace
        sys.stderr.write(f"segfactory: error: gate refuses service: {problem}\n")
        return EXIT_UNSAFE_VAULT
    gate = Gate(args.home / "vault", win_rule_path=args.win_rule, home_root=args.home)
    expected = gate.ledger.get_meta(META_PINNED) or ""  # the ledger, not CURRENT, says which copy is pinned
    try:
        verify(args.pinned, expected)
    except PinError as exc:
        gate.ledger.queue_event("gate.pin_mismatch", {"reason": str(exc), "when": "start"})
        sys.stderr.write(f"segfactory: error: gate refuses service: {exc}\n")
        return EXIT_PIN_MISMATCH

    def integrity() -> None:
        try:
            verify(args.pinned, expected)
        except PinError as exc:
            gate.ledger.queue_event("gate.pin_mismatch", {"reason": str(exc), "when": "check"})
            raise GateError(f"pinned code mismatch: {exc}") from None

    gate.integrity_check = integrity
    try:
        override = None if args.answer_time is None else parse_override(args.answer_time, args.answer_source)
        serve(
            gate,
            args.socket,
            args.host,
            args.port,
            os.environ.get(args.token_env) or None,
            override,
            os.environ.get(args.agent_token_env) or None,
        )
    except SegfactoryError as exc:
        sys.stderr.write(f"segfactory: error: {exc}\n")
        return 2
    return 0
