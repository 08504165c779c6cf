"""The ``segfactory`` command line.

Each area's commands live in a module of their own (``cli/*_cmds.py``) and register themselves
with ``register(app)``. Only the module of the command being run is imported: every other
command is a stand-in that carries the first paragraph of its help from ``COMMANDS``, so
``segfactory --help`` imports no command module at all, and ``segfactory evaluate`` none but
``cli.vision_cmds``. A command module imports our own code at the top; heavy libraries (torch,
onnxruntime, langgraph) and the modules that load them at import time stay inside the functions
that need them. ``tests/test_cli_table.py`` checks ``COMMANDS`` against the modules.
"""

from __future__ import annotations

import importlib
import sys
from typing import Protocol, cast

import typer

from segfactory.errors import SegfactoryError
from segfactory.handover import adopt
from segfactory.logs import configure
from segfactory.text import inert

HELP = "An experiment factory for segmentation models whose improvements can be trusted."

# command -> (its module under cli/, the first paragraph of its help), in the order --help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "init": (
        "home_cmds",
        "Create the factory home: layout, dataset synthetic/v1, secret-seeded tiers in the vault.",
    ),
    "train": (
        "vision_cmds",
        "Train a model (or tune baseline-classical) and check its reload and ONNX export.",
    ),
    "evaluate": (
        "vision_cmds",
        "Score a model through onnxruntime: pixel, object, size-bin, boundary and slice metrics.",
    ),
    "analyse": (
        "analysis_cmds",
        "Analyse a model on dev: error types, slices, label errors, recommendations (Markdown + HTML).",
    ),
    "run": (
        "agents_cmds",
        "Run the factory: analyse, propose, train in the sandbox, gate, judge, then milestone and report.",
    ),
    "report": (
        "agents_cmds",
        "Show where a run's report is and its counts (the report itself is for people).",
    ),
    "sweep": (
        "controls_cmds",
        "An Optuna sweep at the agents' cost: same runner, sandbox, gate rule and replicate.",
    ),
    "aa": (
        "controls_cmds",
        "A/A runs through the agents' pipeline: every win is false; reports both rules' false-win rates.",
    ),
    "compare": (
        "controls_cmds",
        "Equal device-seconds per arm over seeds, each arm from the same incumbent; arms ranked by sealed\n"
        "worst-slice recall (object F1 beside it) with paired differences; a best-so-far plot.",
    ),
    "console": (
        "console_cmds",
        "Serve the console (runs, approvals chat, label review, audit log); prints its login link.",
    ),
    "challenge": (
        "challenge_cmds",
        "Re-derive a claimed win or finding with new seeds; uphold or retract it (people/challenges/).",
    ),
    "realism": (
        "realism_cmds",
        "Realism checks of a synthetic set against a real-dev set: aggregates only, "
        "not the test that counts.",
    ),
    "topup": (
        "realism_cmds",
        "Targeted synthetic top-up against plain augmentation and nothing, measured on a real slice.",
    ),
    "stand-in": (
        "realism_cmds",
        "Write a shifted-domain synthetic stand-in for real data (NOT real data) in the import layout.",
    ),
    "round-two": (
        "realism_cmds",
        "Round two after a top-up: the next weakest dev slice and a different kind of fix, recorded.",
    ),
    "data": ("data_cmds", "Generate, check, export and import split folders."),
    "gate": ("gate_cmds", "The locked evaluator: serve, status, submit, milestones, tiers."),
    "attack": ("gate_cmds", "Attacks on evaluators (Blum & Hardt boosting)."),
    "sandbox": (
        "sandbox_cmds",
        "Sandboxes for agent code: build the image, verify the policy, run a command.",
    ),
    "audit": ("audit_cmds", "Verify, check and show the tamper-evident audit log."),
    "approvals": (
        "agents_cmds",
        "Data requests and judge escalations waiting for a person: list, approve, deny.",
    ),
    "device": ("runner_cmds", "The device the scheduler plans with: its measured memory profile."),
    "curate": (
        "curate_cmds",
        "Curate training data: whole images, defect masks, plans and their random control.",
    ),
    "label": ("label_cmds", "The labelling loop: auto-label, review, finetune."),
}


def _global(
    log_json: bool = typer.Option(False, "--log-json", help="Logs on stderr as one JSON object a line."),
) -> None:
    """An experiment factory for segmentation models whose improvements can be trusted."""
    if log_json:
        configure(json_lines=True)


def _not_loaded() -> None:
    raise AssertionError("a stand-in command ran: cli.command_in missed the command's name")


def command_in(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (the global options are
    flags and take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_app(command: str | None) -> typer.Typer:
    """The app with ``command``'s module loaded and a stand-in for every command of the others."""
    app = typer.Typer(
        name="segfactory",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_global)
    owner = COMMANDS[command][0] if command in COMMANDS else None
    if owner is not None:
        importlib.import_module(f"cli.{owner}").register(app)
    for name, (module, first_paragraph) in COMMANDS.items():
        if module != owner:
            app.command(name, help=first_paragraph)(_not_loaded)
    return app


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; a SegfactoryError becomes one line on stderr and its exit code."""
    configure()  # readable, or JSON lines when SEGFACTORY_LOG_JSON is set; --log-json switches later
    adopt()  # restarted by a root parent: die with it, take the credential and ticket identity it handed
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = build_app(command_in(argv))(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:  # click returns `typer.Exit(code)` here instead of raising
            return code
    except SegfactoryError as exc:
        sys.stderr.write(f"segfactory: error: {inert(str(exc), multiline=False)}\n")
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("segfactory: aborted\n")
        return 130
    except Exception as exc:  # usage errors: a missing or malformed option, an unknown command
        if isinstance(exc, _usage_errors()):
            usage = cast(_UsageError, exc)
            sys.stderr.write(f"segfactory: error: {usage.format_message()} (see --help)\n")
            return int(usage.exit_code)
        raise
    return 0


class _UsageError(Protocol):
    exit_code: int

    def format_message(self) -> str: ...


def _usage_errors() -> tuple[type[Exception], ...]:
    """The exception bases of command-line usage errors. Typer from 0.29 on parses with its own
    copy of click, whose errors are ``typer.TyperException``s and not click's; older Typer raises
    click's own."""
    import click

    own = getattr(typer, "TyperException", None)
    return (click.exceptions.ClickException, *([own] if own is not None else []))
