"""``scripts/check_boundaries.py``: packages meet at public names; what crosses untyped is listed and
only shrinks; the count of ``dict[str, Any]`` in the tree only falls."""

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


CEILING = "# untyped-dicts: 3\n"  # LIBRARY writes dict[str, Any] three times


def tree(tmp_path: Path, allowed: str, user: str) -> Path:
    (tmp_path / "vision").mkdir()
    (tmp_path / "vision" / "lib.py").write_text(LIBRARY)
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "use.py").write_text(user)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "boundaries-allowed.txt").write_text(CEILING + allowed)
    return tmp_path


def allow(root: Path, text: str) -> None:
    (root / "scripts" / "boundaries-allowed.txt").write_text(CEILING + text)


def test_the_repository_passes() -> None:
    result = check(REPO)
    assert result.returncode == 0, result.stdout


def test_an_untyped_result_another_package_imports_is_refused(tmp_path: Path) -> None:
    result = check(tree(tmp_path, "", "from vision.lib import score, typed\n"))
    assert result.returncode == 1
    assert result.stdout.startswith("vision.lib.score: takes or returns dict[str, Any] across packages")
    assert "typed" not in result.stdout


def test_a_class_brings_its_methods_private_ones_included(tmp_path: Path) -> None:
    result = check(tree(tmp_path, "", "from vision.lib import Store\n"))
    assert result.returncode == 1
    assert sorted(line.split(":")[0] for line in result.stdout.splitlines()) == [
        "vision.lib.Store._own",
        "vision.lib.Store.put",
    ]


def test_a_listed_one_passes_and_a_stale_or_unkinded_entry_fails(tmp_path: Path) -> None:
    root = tree(tmp_path, "vision.lib.score payload\n", "from vision.lib import score\n")
    assert check(root).returncode == 0
    allow(root, "vision.lib.score payload\nvision.lib.gone payload\n")
    assert "vision.lib.gone no longer crosses untyped" in check(root).stdout
    allow(root, "vision.lib.score whatever\n")
    assert "kind must be one of" in check(root).stdout
    allow(root, "vision.lib.score result\n")
    assert "kind must be one of payload, config, rows" in check(root).stdout  # a result is a record


def test_a_function_used_only_inside_its_own_package_is_its_own_business(tmp_path: Path) -> None:
    root = tree(tmp_path, "", "")
    (root / "vision" / "other.py").write_text("from vision.lib import score\n")
    assert check(root).returncode == 0


def test_a_private_module_or_name_of_another_package_is_refused_even_inside_a_function(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path, "", "")
    (root / "vision" / "_inner.py").write_text("x = 1\n")
    (root / "gate" / "reach.py").write_text(
        "def f() -> int:\n    from vision._inner import x\n    return x\n"
    )
    (root / "gate" / "name.py").write_text("from vision.lib import _hidden\n")
    result = check(root)
    assert result.returncode == 1
    assert "gate/reach.py:2: imports _inner from vision._inner, private to vision" in result.stdout
    assert "gate/name.py:1: imports _hidden from vision.lib, private to vision" in result.stdout
    (root / "vision" / "own.py").write_text("from vision._inner import x\n")  # its own package: fine
    (root / "gate" / "reach.py").unlink()
    (root / "gate" / "name.py").unlink()
    assert check(root).returncode == 0


def test_the_count_of_untyped_dicts_only_falls(tmp_path: Path) -> None:
    root = tree(tmp_path, "", "")
    assert check(root).returncode == 0
    (root / "gate" / "more.py").write_text("from typing import Any\nx: dict[str, Any] = {}\n")
    assert "written 4 times, above the ceiling 3" in check(root).stdout
    (root / "gate" / "more.py").write_text("x: dict[str, int] = {}\n")
    (root / "vision" / "lib.py").write_text(
        LIBRARY.replace("def score(x: int) -> dict[str, Any]", "def score(x: int) -> int")
    )
    assert "written 2 times, under the ceiling 3: lower it to 2" in check(root).stdout
