"""The ``segfactory`` command line.

Each area registers its commands from its own module; heavy libraries (torch, onnxruntime,
langgraph) are imported inside the command functions that need them, so ``--help`` is fast.
"""

from __future__ import annotations

import logging
import os
import sys

import typer

from segfactory.cli import (
    agents_cmds,
    analysis_cmds,
    audit_cmds,
    challenge_cmds,
    console_cmds,
    controls_cmds,
    curate_cmds,
    data_cmds,
    gate_cmds,
    home_cmds,
    label_cmds,
    realism_cmds,
    runner_cmds,
    sandbox_cmds,
    vision_cmds,
)
from segfactory.errors import SegfactoryError

app = typer.Typer(
    name="segfactory",
    help="An experiment factory for segmentation models whose improvements can be trusted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (
    home_cmds,
    data_cmds,
    vision_cmds,
    analysis_cmds,
    gate_cmds,
    sandbox_cmds,
    audit_cmds,
    agents_cmds,
    controls_cmds,
    runner_cmds,
    curate_cmds,
    console_cmds,
    challenge_cmds,
    realism_cmds,
    label_cmds,
):
    module.register(app)


def _configure_logging() -> None:
    """Logs go to stderr (stdout carries `--json` objects); level from SEGFACTORY_LOG_LEVEL."""
    level = os.environ.get("SEGFACTORY_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(stream=sys.stderr, level=level, format="%(levelname)s %(name)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; a SegfactoryError becomes one line on stderr and its exit code."""
    _configure_logging()
    try:
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:  # click returns `typer.Exit(code)` here instead of raising
            return code
    except SegfactoryError as exc:
        sys.stderr.write(f"segfactory: error: {exc}\n")
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("segfactory: aborted\n")
        return 130
    except Exception as exc:  # click usage errors and friends
        import click

        if isinstance(exc, click.exceptions.ClickException):
            sys.stderr.write(f"segfactory: error: {exc.format_message()}\n")
            return exc.exit_code
        raise
    return 0
