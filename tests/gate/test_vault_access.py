"""Only the gate process opens the vault: everything else moves the best, rotates a tier or reads
the current best through the gate's host surface."""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.client import GateClient, running_gate
from segfactory.errors import GateError
from tests.gate import models
from tests.gate.conftest import build_home

REPO = Path(__file__).resolve().parents[2]
# Modules that open the vault in-process: the gate's decision procedure, ledger, set-up, tiers
# and the start's reference verdict.
VAULT_MODULES = {"gate.core", "gate.ledger", "gate.setup", "gate.tiers", "gate.leakage", "gate.calibrate"}
# Outside gate/, only root's set-up and a person's own gate commands may use them.
ALLOWED = {"cli/init.py", "cli/gate_cmds.py"}
HOST_PACKAGES = (
    "cli",
    "agents",
    "controls",
    "runner",
    "audit",
    "console",
    "sandbox",
    "segfactory",
    "analysis",
    "vision",
    "synthetic",
)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_no_host_module_opens_the_vault_in_process() -> None:
    offenders = {}
    for package in HOST_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = str(path.relative_to(REPO))
            hits = sorted(_imports(path) & VAULT_MODULES)
            if hits and name not in ALLOWED:
                offenders[name] = hits
    assert not offenders, f"host modules that open the vault instead of asking the gate: {offenders}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[GateClient, Path]]:
    home, _ = build_home(tmp_path / "home")
    with running_gate(home) as client:
        yield client, home


@pytest.mark.bwrap
@pytest.mark.slow
def test_an_aa_reference_is_a_move_of_its_own_kind(served: tuple[GateClient, Path], tmp_path: Path) -> None:
    client, home = served
    reference = models.save(models.threshold_model(bias=-0.6), tmp_path / "ref.onnx")
    sha = client.set_reference(reference, "A/A run aa-1: reference aa-1-ref becomes the best")
    assert client.status().current_best == sha
    with sqlite3.connect(f"file:{home / 'vault' / 'ledger.sqlite'}?mode=ro", uri=True) as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM best ORDER BY id")]
    assert kinds == ["init", "reference"]  # never recorded as a promotion
    with pytest.raises(GateError, match="409"):
        client.set_reference(home / "home.json", "not a model")  # intake applies


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_rotation_is_drawn_by_the_gate(served: tuple[GateClient, Path]) -> None:
    client, _ = served
    before = {t.tier: t.version for t in client.status().tiers if t.tier == "sealed"}
    version = client.rotate("sealed")
    versions = [t.version for t in client.status().tiers if t.tier == "sealed"]
    assert version == before["sealed"] + 1 and version in versions


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_redrawn_confirm_tier_has_its_full_budget(served: tuple[GateClient, Path], tmp_path: Path) -> None:
    from controls.isolation import spent_tiers

    client, _ = served
    model = models.save(models.threshold_model(bias=-0.6), tmp_path / "m.onnx")
    client.submit(model, None, "t-spends-one")
    assert spent_tiers(client.status().tiers) == ["confirm-a"]
    version = client.rotate("confirm-a")
    current = max((t for t in client.status().tiers if t.tier == "confirm-a"), key=lambda t: t.version)
    assert current.version == version and current.spent == 0 and current.left == current.budget > 0
    assert spent_tiers(client.status().tiers) == []
