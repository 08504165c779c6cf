"""The artefact test: the classic false "collapse" from evaluating outside the trained range.

A model trained with almost no blur augmentation (sigma ≤ 0.25 px) is evaluated under detector
blur of sigma 1.5 px and "collapses". The challenge re-derives it with new host seeds through the
real runner in the real bwrap sandbox, finds that the evaluation lay outside the range training
covered, trains a control over the full range (its drop is small), and retracts the claim.
Tiny on purpose: 32 px discs, 192 train / 64 dev images, 5 epochs, one thread per worker.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agents.challenge import (
    ChallengeSetup,
    ClaimKind,
    Verdict,
    auto_challenge_needed,
    challenge_ticket,
    collapse_claim,
    retractions,
    write_claim,
)
from audit import AuditLog
from runner import TicketStatus, execute_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion, create_version
from tests.challenge.conftest import RUN
from tests.conftest import REPO
from tests.vision._data import make_version
from vision.evaluate import evaluate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

NARROW = {
    "model": {"name": "unet-mobilenetv3", "decoder_width": 8},
    "epochs": 5,
    "batch_size": 16,
    "threads": 1,
    "optim": {"lr": 0.006},
    "augment": {"p": 0.5, "blur_sigma": {"low": 0.0, "high": 0.25}},
}
ARTIFACTS = REPO / "test-artifacts" / "challenge"
SEVERITY = 3  # detector_blur sigma 1.5 px: six times the trained 0.25


@pytest.fixture
def discs(home: Home, tmp_path: Path) -> DatasetVersion:
    make_version(tmp_path / "src", 192, 64, 32, seed=0, radii=(2.0, 3.0, 4.0), contrast=0.3, noise=0.02)
    return create_version(
        home.root, "discs", {s: tmp_path / "src" / s for s in ("train", "dev")}, approve_it=True
    )


def _train_narrow(home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler) -> Any:
    ticket = Ticket(
        id="t-narrow",
        arm="agent",
        kind="config",
        hypothesis="the reference preset, light blur aug",
        change={},
        budget={"device_seconds": 600, "epochs": 5},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=7,
    )
    outcome = execute_ticket(
        ticket,
        home=home,
        dataset_version=dataset,
        backend="bwrap",
        base_config=NARROW,
        audit=audit_log,
        run_id=RUN,
        scheduler=scheduler,
    )
    assert outcome.status is TicketStatus.DONE, outcome.reason
    return outcome


def test_out_of_range_collapse_is_retracted(
    marked_home: Home, discs: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler
) -> None:
    home = marked_home
    home.marker.write_text('{"profile": "default", "created": 0.0, "layout": 1}')
    _train_narrow(home, discs, audit_log, scheduler)
    report = evaluate(
        home.tickets_dir(RUN) / "t-narrow" / "model.onnx", discs.dev, with_robustness=True, n_boot=200
    )
    claim = collapse_claim(report, "t-narrow", RUN, perturbation="detector_blur", severity=SEVERITY)
    assert claim is not None and claim.effect >= 0.2, report.robustness  # the "collapse"
    ci = report.intervals["object_f1"]
    assert auto_challenge_needed(claim.effect, ci.low, ci.high).needed  # far beyond the noise floor
    write_claim(home, claim)

    record = challenge_ticket(
        ChallengeSetup(home, audit_log, backend="bwrap", scheduler=scheduler), "t-narrow", seeds=2, run_id=RUN
    )

    assert record.claim.kind is ClaimKind.COLLAPSE
    assert record.verdict is Verdict.RETRACTED, record.reasons
    first, control = record.range_checks[0], record.range_checks[-1]
    assert not first.within_training_range and first.trained_high == 0.25 and first.value == 1.5
    assert control.within_training_range and control.trained_high == 3.0
    assert any("out-of-range evaluation" in r for r in record.reasons)
    assert "artefact" in record.reasons[-1]
    full = record.conditions[-1]
    assert full.label == "full-range control" and full.dev_object_f1 is not None
    assert full.perturbed_object_f1 is not None and full.dev_object_f1 - full.perturbed_object_f1 < 0.2
    assert {"seed", "config_sha256", "augment.blur_sigma"} <= set(record.diff)
    assert "dataset_hash" not in record.diff and "code_sha256" not in record.diff
    assert [r.challenge_id for r in retractions(home)] == [record.challenge_id] and not record.demoted
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # the figures of docs/labelling.md's worked retraction
    (ARTIFACTS / "artefact.json").write_text(record.model_dump_json(indent=1))
