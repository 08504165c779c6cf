"""The top-up and realism commands refuse bad input with one clear line, before any training."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult
from tests.realism._home import tiny_home


def test_topup_over_budget_and_unmeetable_slice_fail_before_training(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    home = tiny_home(tmp_path / "home", n_train=8, n_dev=4)
    base = ("topup", "--real", str(tmp_path / "none"), "--home", str(home), "--json")
    over = cli(*base, "--slice", "thin", "--n", "0,100,200", "--ticket-budget", "60s", "--budget", "2m")
    assert over.returncode != 0 and over.stdout == ""
    assert over.stderr.strip() == (
        "segfactory: error: top-up needs 5 tickets x 60 s = 300 device-seconds but "
        "--budget is 120 s; raise the budget, lower --ticket-budget or use fewer doses"
    )
    bad = cli(*base, "--slice", "background:marble", "--n", "0,100")
    assert (
        bad.returncode != 0
        and "no background 'marble'; known: flat, gradient, vignette, texture" in bad.stderr
    )
    assert not (home / "runs").exists() or not any((home / "runs").rglob("model.onnx"))


def test_round_two_without_a_topup_says_what_to_run(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    home = tiny_home(tmp_path / "home", n_train=8, n_dev=4)
    result = cli("round-two", "--run-id", "r9", "--home", str(home), "--json")
    assert result.returncode != 0 and result.stdout == ""
    assert "no top-up report at" in result.stderr and "segfactory topup --run-id r9" in result.stderr
