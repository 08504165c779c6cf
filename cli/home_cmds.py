"""CLI commands for the home: ``init``. See docs/cli.md for the contract."""

from __future__ import annotations

from typing import Annotated

import typer

from cli._common import HomeOpt, JsonOpt, console, emit_json
from cli.init import InitSummary, initialise
from segfactory.home import Home


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("init")(init_cmd)


def _print_summary(summary: InitSummary) -> None:
    from rich.table import Table

    out = console()
    state = "existing home (nothing rebuilt)" if summary["existing"] else "created home"
    out.print(f"{state}: {summary['home']}  profile: {summary['profile']}")
    for dataset in summary.get("datasets", []):
        out.print(f"dataset {dataset['ref']} (approved: {dataset['approved']})")
    table = Table(title="held-back tiers (in the vault)")
    for column in ("tier", "version", "images", "image size", "defects"):
        table.add_column(column)
    for row in summary["tiers"]:
        table.add_row(
            row["tier"],
            row["version"],
            str(row["count"]),
            f"{row['size']}x{row['size']}",
            str(row["n_defects"]),
        )
    out.print(table)


def init_cmd(
    profile: Annotated[str, typer.Option("--profile", help="demo (small, fast) or default.")] = "default",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Create the factory home: layout, dataset synthetic/v1, secret-seeded tiers in the vault."""
    summary = initialise(Home.resolve(home), profile)
    if json_out:
        emit_json(summary)
    else:
        _print_summary(summary)
