"""Home resolution and the refusal of a home inside the source tree (through the real CLI)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from segfactory.errors import HomeError
from segfactory.home import SOURCE_ROOT, Home, default_home


def test_env_home_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEGFACTORY_HOME", str(tmp_path / "h"))
    assert default_home() == tmp_path / "h"


def test_home_inside_source_tree_is_refused() -> None:
    with pytest.raises(HomeError, match="inside the source tree"):
        Home.resolve(SOURCE_ROOT / "somewhere")


def test_cli_refuses_home_inside_source_tree(cli: Callable[..., Any]) -> None:
    target = SOURCE_ROOT / "home-in-tree"
    result = cli("init", "--profile", "demo", "--home", str(target))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "inside the source tree" in result.stderr
    assert not target.exists()
