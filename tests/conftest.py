"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

# Gates the suite starts (`gate serve` under `running_gate`, `run`, `gate submit`) answer unpadded
# unless a test asks for an answer time: the fixed answer time (30 s on a demo home, 480 s
# otherwise) would make every query of every end-to-end test wait that long. The padding rule
# itself is tested with explicit `--answer-time` values (tests/gate/test_service.py).
os.environ.setdefault("SEGFACTORY_GATE_ANSWER_TIME", "0")

REPO = Path(__file__).resolve().parent.parent


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def tmp_home(tmp_path: Path) -> Path:
    """A path for a fresh factory home, outside the source tree (not yet initialised)."""
    return tmp_path / "home"


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    """Run the real ``segfactory`` entry point in a subprocess, as a user would."""

    def run(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "segfactory", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env=env,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run
