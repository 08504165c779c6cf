"""Options and output helpers shared by every CLI module.

Every command takes ``--home``; every command that reports takes ``--json`` and then prints
exactly one JSON object on stdout. Human output goes through rich.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from segfactory.errors import UsageError
from segfactory.home import Home

if TYPE_CHECKING:
    from vision.training_data import TrainingRange

HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="Factory home (default: $SEGFACTORY_HOME, else the XDG data dir; /var/lib/segfactory as root).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Sandbox backend: docker or bwrap.")]


MAX_CONCURRENCY = 8  # tickets at once under one scheduler (run, aa --concurrency)
AUTO = "auto"  # run --concurrency auto: runner.scheduler.AUTO_CONCURRENCY (not imported: --help stays light)


def check_concurrency(value: int) -> None:
    """``--concurrency`` is 1..MAX_CONCURRENCY; anything else is one clear error before set-up."""
    if not 1 <= value <= MAX_CONCURRENCY:
        raise UsageError(f"--concurrency {value}: expected 1..{MAX_CONCURRENCY}")


def concurrency_choice(text: str) -> int | str:
    """``run --concurrency``: ``auto`` (the scheduler sizes it from the cores and the measured
    memory) or a number 1..MAX_CONCURRENCY; anything else is one clear error before set-up."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--concurrency {text}: expected auto or 1..{MAX_CONCURRENCY}") from None
    check_concurrency(value)
    return value


def emit_json(obj: Mapping[str, object]) -> None:
    """Print one JSON object on stdout and nothing else."""
    sys.stdout.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def exit_without_teardown(code: int = 0) -> None:
    """End a command whose work is written, synced and printed, skipping the interpreter's teardown.

    Only for commands that leave nothing for exit handlers to do (no temporary folders, no open
    servers): after ``data generate`` the teardown of numba's compiled kernels and of 460 MB of
    mapped arrays took 0.15-0.25 s (docs/benchmarks.md), a twentieth of the command."""
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def console() -> Any:
    """A rich console on stdout (imported lazily to keep start-up fast)."""
    from rich.console import Console

    return Console()


def home_for(home: Path | None, *, create: bool = False, profile: str = "default") -> Home:
    """Resolve the home; with ``create`` a missing home is initialised and the user told so."""
    resolved = Home.resolve(home)
    if create and not resolved.exists():
        from cli.init import (
            initialise,
        )  # deferred: home set-up loads the gate and scipy; most runs never need it

        sys.stderr.write(f"no home at {resolved.root}; creating one with the {profile} profile\n")
        initialise(resolved, profile=profile)
    return resolved


def print_training_range(con: Any, block: TrainingRange) -> None:
    """One line on the training range, then its reasons and a shift reading of zero detections."""
    if not block.known:
        con.print(f"training range: unknown ({block.reason})", highlight=False, soft_wrap=True)
    elif block.outside:
        con.print(f"[red]outside the training range[/red] of {block.train_split}:", highlight=False)
        for reason in block.reasons or []:
            con.print(f"  {reason}", highlight=False, soft_wrap=True)
    else:
        con.print(f"within the training range of {block.train_split}", highlight=False)
    if block.message:
        con.print(f"[red]{block.message}[/red]", highlight=False, soft_wrap=True)
