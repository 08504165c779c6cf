"""Fast contract tests of ``run``, ``report`` and ``approvals``: bad input fails with one line on
stderr before anything is set up (no home is created)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(("args", "message"), [
    (["--proposer", "gpt:4"], "proposer 'gpt:4' is not registered; known: rules"),
    (["--profile", "tiny"], "profile 'tiny' is not defined; known: demo, default"),
    (["--backend", "k8s"], "sandbox backend 'k8s' is not registered; known: bwrap, docker"),
    (["--budget", "soon"], "--budget 'soon'"),
])
def test_run_refuses_bad_input_before_any_set_up(cli: Cli, tmp_home: Path, args: list[str], message: str) -> None:
    result = cli("run", "--home", str(tmp_home), *args)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith("segfactory: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not tmp_home.exists()


def test_a_vendor_proposer_without_its_key_fails_before_any_set_up(cli: Cli, tmp_home: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    result = cli("run", "--home", str(tmp_home), "--proposer", "anthropic:claude-x", env=env)
    assert result.returncode != 0 and "ANTHROPIC_API_KEY is not set" in result.stderr
    assert not tmp_home.exists()


def test_report_of_an_unknown_run_says_how_to_finish_it(cli: Cli, tmp_home: Path) -> None:
    result = cli("report", "r-none", "--home", str(tmp_home), "--json")
    assert result.returncode != 0 and result.stdout == ""
    assert "run 'r-none' has no report" in result.stderr and "--resume r-none" in result.stderr


def test_approvals_list_without_any_run_state(cli: Cli, tmp_home: Path) -> None:
    result = cli("approvals", "list", "--home", str(tmp_home), "--json")
    assert result.returncode != 0 and "no run state" in result.stderr
