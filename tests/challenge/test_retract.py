"""The gate's POST /retract over real HTTP: the best moves back only past the retracted best."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.intake import inspect_model
from gate.ledger import Ledger
from segfactory.errors import GateError
from segfactory.home import Home
from tests.challenge.conftest import served_gate
from tests.runner._standin import tiny_model


def _models(tmp: Path) -> tuple[Path, Path]:
    baseline, promoted = tmp / "baseline.onnx", tmp / "promoted.onnx"
    baseline.write_bytes(tiny_model().replace(b"standin", b"baselin"))
    promoted.write_bytes(tiny_model())
    return baseline, promoted


def _ledger(home: Home, *moves: tuple[Path, str]) -> None:
    home.vault.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(home.vault / "ledger.sqlite")
    try:
        for model, kind in moves:
            ledger.set_best(inspect_model(model).sha256, str(model), kind, "test")
    finally:
        ledger.close()


def _best(home: Home) -> dict[str, str]:
    ledger = Ledger(home.vault / "ledger.sqlite")
    try:
        best = ledger.current_best()
        assert best is not None
        return best
    finally:
        ledger.close()


def test_retract_moves_the_best_back_and_only_past_the_best(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    baseline, promoted = _models(tmp_path)
    _ledger(home, (baseline, "init"), (promoted, "promotion"))
    base_sha, prom_sha = inspect_model(baseline).sha256, inspect_model(promoted).sha256
    with served_gate(home) as gate:
        assert gate.retract(base_sha, "not the best: nothing moves") is None
        assert _best(home)["model_sha256"] == prom_sha
        assert gate.retract(prom_sha, "challenge ch-1 retracted t1") == base_sha
        assert gate.retract(prom_sha, "again") is None  # already demoted
        with pytest.raises(GateError, match="400"):
            gate._json("POST", "/retract", json={"model_sha256": prom_sha})
    best = _best(home)
    assert best["model_sha256"] == base_sha and best["kind"] == "retraction"


def test_retracting_the_only_best_ever_is_refused(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    baseline, _ = _models(tmp_path)
    _ledger(home, (baseline, "init"))
    with served_gate(home) as gate, pytest.raises(GateError, match="409.*only best ever recorded"):
        gate.retract(inspect_model(baseline).sha256, "nothing earlier")
