"""A real A/A with one run of each kind: ``segfactory aa --runs 2 --continued 1``.

The fresh reference trains the demo's base config; the continuation reference trains on from its
weights and becomes the best; the continued candidate continues the same weights under another
seed. Through the real route, the two continuations must be one recipe: the same parent weights
(by their hash in the lineage), the same config, data and code, so the same fingerprint; only
the seed differs. The fresh candidate starts from fresh weights.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from controls.aa import AaSummary
from runner import TicketOutcome
from segfactory.home import Home
from segfactory.layout import RunLayout, RunsLayout
from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


@dataclass(frozen=True)
class AaRun:
    home: Path
    summary: AaSummary


@pytest.fixture(scope="module")
def aa(tmp_path_factory: pytest.TempPathFactory) -> AaRun:
    home = tmp_path_factory.mktemp("aa") / "home"
    env = {**os.environ, "SEGFACTORY_NO_USER_SEPARATION": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "segfactory", *args, "--home", str(home)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=REPO,
            env=env,
        )

    init = cli("init", "--profile", "demo")
    assert init.returncode == 0, init.stderr[-3000:]
    result = cli("aa", "--runs", "2", "--continued", "1", "--backend", "bwrap", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return AaRun(home=home, summary=AaSummary.model_validate_json(result.stdout))


def test_each_kind_is_judged_against_its_own_reference(aa: AaRun) -> None:
    s = aa.summary
    assert (s.runs, s.continued, s.failed) == (2, 1, 0)
    assert set(s.kinds) == {"fresh", "continued"}
    assert s.kinds["fresh"].reference_dev_score == s.reference_dev_score
    assert s.kinds["continued"].reference_dev_score == s.continuation_dev_score
    assert s.gate_rule.runs == sum(k.gate_rule.runs for k in s.kinds.values())


def test_the_continued_candidate_trains_what_its_reference_trained(aa: AaRun) -> None:
    home, run_id = Home(aa.home), aa.summary.run_id
    layout = RunLayout(home, run_id)
    rows = layout.lineage()
    ref, cref, cand = rows[f"{run_id}-ref"], rows[f"{run_id}-cref"], rows[f"{run_id}-ct000"]
    assert ref.init_from is None and rows[f"{run_id}-aa000"].init_from is None
    outcome = TicketOutcome.model_validate_json(layout.ticket(f"{run_id}-ref").outcome.read_text())
    assert outcome.evidence is not None and cref.init_from is not None and cand.init_from is not None
    assert cref.init_from.sha256 == cand.init_from.sha256 == outcome.evidence.checkpoint_sha256
    assert cref.fingerprint == cand.fingerprint != ref.fingerprint  # the weights are an input
    unseeded = [{k: v for k, v in row.config.items() if k != "seed"} for row in (cref, cand)]
    assert unseeded[0] == unseeded[1] and cref.config["seed"] != cand.config["seed"]
    # the candidate is compared with the continuation reference, which the gate made the best
    references = [p.ticket_id for p in RunsLayout(home).promotions() if p.kind == "reference"]
    assert references[-2:] == [f"{run_id}-ref", f"{run_id}-cref"]
