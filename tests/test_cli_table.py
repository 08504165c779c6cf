"""The command line loads only the module of the command being run, and its table says true.

``cli.COMMANDS`` names each command's module and the first paragraph of its help, which
``segfactory --help`` shows without importing any command module. A table that drifts from the
modules would list a command that does not run as listed, or run a module for the wrong name.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import typer
import typer.main

from cli import COMMANDS, build_app, command_in
from tests.conftest import REPO


def _registered(module: str) -> dict[str, str]:
    """Each command ``cli.<module>`` registers, with the first paragraph of its help."""
    app = typer.Typer()
    app.callback()(lambda: None)
    importlib.import_module(f"cli.{module}").register(app)
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return {
        name: inspect.cleandoc(command.help or "").partition("\f")[0].split("\n\n")[0]
        for name, command in group.commands.items()
    }


def test_the_table_names_each_commands_module_and_help() -> None:
    modules = sorted({module for module, _ in COMMANDS.values()})
    real = {name: (module, text) for module in modules for name, text in _registered(module).items()}
    assert real == COMMANDS


def test_help_imports_no_command_module_and_a_command_only_its_own() -> None:
    code = (
        "import json, sys\n"
        "from cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "finally:\n"
        "    loaded = sorted(m for m in sys.modules if m.startswith('cli.') and m.endswith('_cmds'))\n"
        "    heavy = sorted(m for m in ('numpy', 'pydantic', 'scipy', 'torch') if m in sys.modules)\n"
        "    sys.stderr.write(json.dumps([loaded, heavy]) + '\\n')\n"
    )

    def loaded(*argv: str) -> list[list[str]]:
        run = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True)
        return list(json.loads(run.stderr.strip().splitlines()[-1]))

    assert loaded("--help") == [[], []]
    assert loaded("--log-json", "evaluate", "--help")[0] == ["cli.vision_cmds"]
    assert loaded("gate", "status", "--help")[0] == ["cli.gate_cmds"]
    assert loaded("no-such-command")[0] == []


def test_the_command_is_the_first_word_that_is_not_an_option() -> None:
    assert command_in(["--log-json", "gate", "status", "--json"]) == "gate"
    assert command_in(["--help"]) is None and command_in([]) is None
    app = typer.main.get_command(build_app("gate"))
    assert isinstance(app, typer.core.TyperGroup)
    assert isinstance(app.commands["gate"], typer.core.TyperGroup)  # the real group, with its commands
    assert not isinstance(app.commands["evaluate"], typer.core.TyperGroup)  # a stand-in
