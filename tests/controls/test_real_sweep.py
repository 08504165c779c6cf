"""One real sweep trial end to end: ``segfactory init`` then ``segfactory sweep --max-trials 1``.

The real bwrap sandbox trains the default config (trial 0, enqueued), the host computes its dev
score, the study lands in the home's ``optuna.db``, and the audit log shows the sandbox run. The
throw-away home keeps a root-owned vault (``SEGFACTORY_NO_USER_SEPARATION=1``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.bwrap,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]


def test_a_real_sweep_trial_is_the_default_config(tmp_path: Path) -> None:
    import optuna

    home = tmp_path / "home"
    env = {**os.environ, "SEGFACTORY_NO_USER_SEPARATION": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "segfactory", *args, "--home", str(home)], capture_output=True,
                              text=True, timeout=900, cwd=REPO, env=env)

    assert cli("init", "--profile", "demo").returncode == 0
    result = cli("sweep", "--sampler", "random", "--budget", "2m", "--seed", "3", "--max-trials", "1", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["trials"] == 1 and summary["failed"] == 0 and summary["device_seconds"] > 0
    assert 0.0 <= summary["best_dev_score"] <= 1.0
    base = yaml.safe_load((REPO / "configs" / "run-demo.yaml").read_text())
    assert summary["best_params"]["optim.lr"] == base["optim"]["lr"]
    assert summary["best_params"]["batch_size"] == base["batch_size"]
    study = optuna.load_study(study_name=summary["study_name"], storage=f"sqlite:///{home / 'optuna.db'}")
    assert study.trials[0].value == pytest.approx(summary["best_dev_score"])
    people = home / "runs" / summary["run_id"] / "people"
    row = json.loads((people / "sweep.jsonl").read_text().splitlines()[0])
    assert row["ticket_id"].endswith("-t000")
    log = [json.loads(line) for line in (home / "audit" / "log.jsonl").read_text().splitlines()]
    attempts = [r for r in log if r["run_id"] == summary["run_id"] and r["event"] == "ticket_attempt"]
    assert len(attempts) == 1 + (1 if row["replicate_id"] else 0)
    outcome = json.loads((home / "runs" / summary["run_id"] / "tickets" / row["ticket_id"] / "outcome.json").read_text())
    assert outcome["evidence"]["dev_metrics"]["object_f1"] == pytest.approx(summary["best_dev_score"])
