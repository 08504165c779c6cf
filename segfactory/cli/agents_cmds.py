"""CLI commands for agents. See docs/cli.md for the contract."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
