"""A usage error (missing or malformed option, unknown command) is one clear line, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult


@pytest.mark.parametrize(
    "args,says",
    [
        (["data", "generate", "--n", "5", "--size", "32"], "Missing option '--seed'"),
        (["data", "generate", "--n", "many", "--size", "32", "--seed", "1"], "valid integer"),
        (["no-such-command"], "No such command"),
        (["data", "generate", "--colour", "red"], "No such option"),
    ],
)
def test_a_usage_error_is_one_line_with_exit_code_2(
    cli: Callable[..., CliResult], tmp_path: Path, args: list[str], says: str
) -> None:
    result = cli(*args, "--out", str(tmp_path / "split"), timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("segfactory: error: ") and says in result.stderr
    assert not (tmp_path / "split").exists()
