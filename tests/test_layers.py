"""The import layers of docs/architecture.md, as `make lint` enforces them with import-linter."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "cli",
    "console",
    "controls",
    "agents",
    "runner",
    "audit",
    "gate",
    "sandbox",
    "analysis",
    "vision",
    "synthetic",
    "segfactory",
)


def _contracts() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    return config


def _documented_layers() -> list[str]:
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    return [re.split(r"\s{2,}", line.strip())[0] for line in block.strip().splitlines()]


def test_the_enforced_layers_are_the_documented_ones() -> None:
    layers = _contracts()["importlinter:contract:layers"]
    enforced = [line.strip() for line in layers["layers"].strip().splitlines()]
    assert enforced == _documented_layers()
    ignored = [line.strip() for line in layers.get("ignore_imports", "").strip().splitlines() if line.strip()]
    assert ignored == ["segfactory.__main__ -> cli"]  # `python -m segfactory` starts the CLI, nothing else
    gate = _contracts()["importlinter:contract:gate"]
    assert gate["source_modules"].strip() == "gate"
    assert sorted(gate["forbidden_modules"].split()) == ["agents", "console", "controls", "runner", "sandbox"]


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    lint = [
        sys.executable,
        "-c",
        "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c(['--no-cache']))",
    ]
    kept = subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0, kept.stdout[-2000:]
    evaluate = tmp_path / "vision" / "evaluate.py"
    evaluate.write_text(evaluate.read_text() + "\nimport analysis.report  # noqa: E402,F401\n")
    broken = subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert broken.returncode != 0 and "vision is not allowed to import analysis" in broken.stdout
