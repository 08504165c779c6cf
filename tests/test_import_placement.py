"""``scripts/check_imports.py``: first-party imports at the top of each module, or a written reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_imports.py"


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False
    )


def plant(root: Path, package: str, body: str) -> None:
    (root / package).mkdir(parents=True, exist_ok=True)
    (root / package / "mod.py").write_text(body)


def test_the_repository_passes() -> None:
    result = check(REPO)
    assert result.returncode == 0, result.stdout


def test_a_first_party_import_inside_a_function_is_refused(tmp_path: Path) -> None:
    plant(tmp_path, "vision", "def f():\n    from analysis.stats import x\n    return x\n")
    result = check(tmp_path)
    assert result.returncode == 1
    assert (
        "vision/mod.py:2: first-party import inside a function: `from analysis.stats import x`"
        in result.stdout
    )


def test_inside_a_method_and_a_relative_import_are_refused_too(tmp_path: Path) -> None:
    plant(tmp_path, "gate", "class C:\n    def m(self):\n        from . import other\n        return other\n")
    assert check(tmp_path).returncode == 1


def test_a_written_reason_third_party_and_type_checking_pass(tmp_path: Path) -> None:
    plant(
        tmp_path,
        "vision",
        "def f():\n    import torch\n    from vision.train import t  # deferred: torch\n    return t\n",
    )
    plant(
        tmp_path, "cli", "def cmd():\n    from vision.train import t  # deferred: loads torch\n    return t\n"
    )
    plant(
        tmp_path,
        "agents",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gate.core import Gate\n",
    )
    result = check(tmp_path)
    assert result.returncode == 0, result.stdout


def test_the_reason_may_sit_on_any_line_of_a_long_import(tmp_path: Path) -> None:
    body = (
        "def f():\n    from synthetic._kernels import (  # deferred: numba\n        a,\n        b,\n    )\n"
    )
    plant(tmp_path, "synthetic", body)
    assert check(tmp_path).returncode == 0


def test_the_command_line_is_held_to_the_same_rule(tmp_path: Path) -> None:
    plant(tmp_path, "cli", "def cmd():\n    from gate.client import GateClient\n    return GateClient\n")
    result = check(tmp_path)
    assert result.returncode == 1 and "cli/mod.py:2" in result.stdout
