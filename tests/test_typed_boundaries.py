"""``scripts/check_boundaries.py``: what crosses a package boundary untyped is listed, and only shrinks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_boundaries.py"

LIBRARY = (
    "from typing import Any\n\n"
    "def score(x: int) -> dict[str, Any]:\n    return {}\n\n"
    "def typed(x: int) -> int:\n    return x\n\n"
    "class Store:\n"
    "    def put(self, payload: dict[str, Any]) -> None: ...\n"
    "    def _own(self) -> dict[str, Any]:\n        return {}\n"
)


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False
    )


def tree(tmp_path: Path, allowed: str, user: str) -> Path:
    (tmp_path / "vision").mkdir()
    (tmp_path / "vision" / "lib.py").write_text(LIBRARY)
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "use.py").write_text(user)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "boundaries-allowed.txt").write_text(allowed)
    return tmp_path


def test_the_repository_passes() -> None:
    result = check(REPO)
    assert result.returncode == 0, result.stdout


def test_an_untyped_result_another_package_imports_is_refused(tmp_path: Path) -> None:
    result = check(tree(tmp_path, "", "from vision.lib import score, typed\n"))
    assert result.returncode == 1
    assert result.stdout.startswith("vision.lib.score: takes or returns dict[str, Any] across packages")
    assert "typed" not in result.stdout


def test_a_class_brings_its_public_methods_and_not_its_private_ones(tmp_path: Path) -> None:
    result = check(tree(tmp_path, "", "from vision.lib import Store\n"))
    assert result.returncode == 1
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["vision.lib.Store.put"]


def test_a_listed_one_passes_and_a_stale_or_unkinded_entry_fails(tmp_path: Path) -> None:
    root = tree(tmp_path, "vision.lib.score payload\n", "from vision.lib import score\n")
    assert check(root).returncode == 0
    (root / "scripts" / "boundaries-allowed.txt").write_text(
        "vision.lib.score payload\nvision.lib.gone payload\n"
    )
    assert "vision.lib.gone no longer crosses untyped" in check(root).stdout
    (root / "scripts" / "boundaries-allowed.txt").write_text("vision.lib.score whatever\n")
    assert "kind must be one of" in check(root).stdout
    (root / "scripts" / "boundaries-allowed.txt").write_text("vision.lib.score result\n")
    assert "kind must be one of payload, config, rows" in check(root).stdout  # a result is a record


def test_a_function_used_only_inside_its_own_package_is_its_own_business(tmp_path: Path) -> None:
    root = tree(tmp_path, "", "")
    (root / "vision" / "other.py").write_text("from vision.lib import score\n")
    assert check(root).returncode == 0
