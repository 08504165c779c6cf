"""challenge_ticket end to end over the real runner (worker stand-in), a real ledger and audit log;
bad input (unknown ticket, over budget, nothing claimed) through the real CLI and the API."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.challenge import ChallengePolicy, ClaimKind, Verdict, challenge_ticket, retractions
from audit.reader import iter_records
from gate.ledger import Ledger
from segfactory.errors import LimitExceeded, UsageError
from segfactory.home import Home
from tests.challenge.conftest import RUN, Finished, challenge_files, dev_comparison, served_gate
from tests.runner._standin import tiny_model


def events(home: Home) -> list[str]:
    return [r.event for r in iter_records(home.audit / "log.jsonl")]


def payloads(home: Home, event: str) -> list[dict[str, Any]]:
    return [r.payload for r in iter_records(home.audit / "log.jsonl") if r.event == event]


def test_unknown_ticket_is_a_clear_cli_error_and_is_audited(
    marked_home: Home, cli: Callable[..., Any]
) -> None:
    res = cli("challenge", "t-nope", "--home", str(marked_home.root), "--json")
    assert res.returncode != 0 and res.stdout == ""
    assert res.stderr.strip().count("\n") == 0
    assert "segfactory: error: unknown ticket 't-nope'" in res.stderr
    assert payloads(marked_home, "challenge_refused")[-1]["ticket_id"] == "t-nope"
    assert challenge_files(marked_home) == []


def test_over_budget_and_nothing_claimed_are_refused_before_anything_runs(finished: Finished) -> None:
    with pytest.raises(UsageError, match="claims nothing"):
        challenge_ticket(finished.setup, "t1", seeds=1)
    with pytest.raises(UsageError, match="not a ticket id"):
        challenge_ticket(finished.setup, "../t1", seeds=1)
    with pytest.raises(UsageError, match="not a run id"):
        challenge_ticket(finished.setup, "t1", seeds=1, run_id="../r1")
    dev_comparison(finished.home, "t1", finished.dev_f1, finished.dev_f1 - 0.1)
    with pytest.raises(LimitExceeded, match="max_seeds 8"):
        challenge_ticket(finished.setup, "t1", seeds=9)
    finished.setup.policy = ChallengePolicy(max_device_seconds=100)
    with pytest.raises(LimitExceeded, match=r"2 re-runs x 60 device-s = 120 > .* 100"):
        challenge_ticket(finished.setup, "t1", seeds=2)
    refused = payloads(finished.home, "challenge_refused")
    assert len(refused) == 5 and all("over budget" in p["reason"] for p in refused[3:])
    assert challenge_files(finished.home) == []
    assert not any(p.name.startswith("ch-") for p in finished.home.tickets_dir(RUN).iterdir())


@pytest.mark.slow
def test_a_win_that_reproduces_is_upheld(finished: Finished) -> None:
    dev_comparison(finished.home, "t1", finished.dev_f1, finished.dev_f1 - 0.1)
    record = challenge_ticket(finished.setup, "t1", seeds=2)
    assert record.verdict is Verdict.UPHELD, record.reasons
    assert record.claim.kind is ClaimKind.WIN and len(record.seeds) == 2
    assert set(record.diff) == {"seed"}  # same data version, config and code: only the seed varied
    assert all(c.dev_object_f1 == pytest.approx(finished.dev_f1) for c in record.conditions)
    saved = json.loads(challenge_files(finished.home)[0].read_text())
    assert saved["verdict"] == "upheld" and saved["challenge_id"] == record.challenge_id
    assert {"challenge_opened", "challenge_verdict"} <= set(events(finished.home))
    assert retractions(finished.home) == []


def _ledger_with_promoted(home: Home, promoted: Path, tmp: Path) -> str:
    baseline = tmp / "baseline.onnx"
    baseline.write_bytes(tiny_model().replace(b"standin", b"baselin"))
    home.vault.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(home.vault / "ledger.sqlite")
    try:
        from gate.intake import inspect_model

        base = inspect_model(baseline)
        ledger.set_best(base.sha256, str(baseline), "init", "classical baseline")
        ledger.set_best(inspect_model(promoted).sha256, str(promoted), "promotion", "t1 won twice")
    finally:
        ledger.close()
    return base.sha256


@pytest.mark.slow
def test_a_retracted_promoted_win_demotes_the_best_in_the_ledger(finished: Finished, tmp_path: Path) -> None:
    home = finished.home
    model = home.tickets_dir(RUN) / "t1" / "model.onnx"
    baseline_sha = _ledger_with_promoted(home, model, tmp_path)
    dev_comparison(home, "t1", finished.dev_f1 + 0.2, finished.dev_f1 + 0.1)  # a win that will not reproduce
    (home.runs / "promotions.jsonl").write_text(
        json.dumps({"model": str(model), "run_id": RUN, "ticket_id": "t1"}) + "\n"
    )
    with served_gate(home) as gate:  # the demotion goes through the gate's POST /retract
        record = challenge_ticket(replace(finished.setup, gate=gate), "t1", seeds=1)
    assert record.verdict is Verdict.RETRACTED and record.claim.promoted
    assert record.demoted and record.demoted_to == baseline_sha
    ledger = Ledger(home.vault / "ledger.sqlite")
    try:
        best = ledger.current_best()
        assert best is not None and best["model_sha256"] == baseline_sha and best["kind"] == "retraction"
        assert record.challenge_id in ledger.best_history()[-1]["reason"]
    finally:
        ledger.close()
    listed = retractions(home)
    assert [r.challenge_id for r in listed] == [record.challenge_id] and listed[0].demoted
    assert payloads(home, "challenge_demoted")[-1]["best_now"] == baseline_sha
