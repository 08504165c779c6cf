"""The controls' CLI refuses bad input with one clear line and leaves the home untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sweep", "--sampler", "grid", "--budget", "10m"],
            "sampler 'grid' is not registered; known: random, tpe",
        ),
        (["sweep", "--sampler", "tpe", "--budget", "30s"], "too small for one trial"),
        (["aa", "--runs", "0"], "--runs 0: expected 1..500"),
        (["aa", "--runs", "4", "--continued", "5"], "--continued 5: expected 0..4"),
        (["compare", "--arms", "agent,grid", "--budget", "10m"], "unknown grid"),
    ],
)
def test_bad_input_is_one_clear_error_and_no_home(
    cli: Cli, tmp_home: Path, args: list[str], message: str
) -> None:
    result = cli(*args, "--home", str(tmp_home), "--json")
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith("segfactory: error:") and message in result.stderr, result.stderr
    assert not tmp_home.exists()


def test_an_invalid_space_or_corrupted_database_leaves_the_home_as_it_was(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "optuna.db").write_bytes(b"garbage, not sqlite")
    result = cli("sweep", "--budget", "10m", "--home", str(home))
    assert result.returncode != 0 and "not an SQLite file" in result.stderr
    space = tmp_path / "space.yaml"
    space.write_text("params: {optim.lr: {type: float, low: 1, high: 0}}")
    result = cli("sweep", "--budget", "10m", "--space", str(space), "--home", str(tmp_path / "other"))
    assert result.returncode != 0 and "must be below high" in result.stderr
    assert sorted(p.name for p in home.iterdir()) == ["optuna.db"] and not (tmp_path / "other").exists()
