"""The pure decision: range checks, the condition diff, and each verdict branch."""

from __future__ import annotations

from typing import Any

import pytest

from agents.challenge import (
    ChallengePolicy,
    Claim,
    ClaimKind,
    Condition,
    Verdict,
    collapse_claim,
    collapse_verdict,
    diff_conditions,
    range_check,
    win_verdict,
)
from vision.evaluate import EvalReport, Robustness, RobustnessCell
from vision.slices import SliceReport
from vision.training_data import unknown_range

POLICY = ChallengePolicy()
NARROW = {"noise_std": {"low": 0.0, "high": 0.01}}
FULL = {"noise_std": {"low": 0.0, "high": 0.1}, "p": 0.8}


def claim(kind: ClaimKind = ClaimKind.COLLAPSE, **kw: Any) -> Claim:
    base: dict[str, Any] = {
        "kind": kind,
        "ticket_id": "t1",
        "run_id": "r1",
        "source": "test",
        "claimed": 0.2,
        "reference": 0.8,
    }
    if kind is ClaimKind.COLLAPSE:
        base.update(perturbation="lower_dose", severity=5, value=0.1)
    return Claim(**{**base, **kw})


def cond(
    label: str, seed: int, augment: dict[str, Any], clean: float | None, pert: float | None = None
) -> Condition:
    return Condition(
        label=label,
        ticket_id=label,
        seed=seed,
        dataset="d/v1",
        dataset_hash="h",
        code_sha256="c",
        config_sha256="cfg-" + str(sorted(augment)),
        augment=augment,
        dev_object_f1=clean,
        perturbed_object_f1=pert,
    )


def test_range_check_reads_the_trained_augmentation_range() -> None:
    narrow = range_check(claim(), cond("a", 1, NARROW, 0.8))
    assert not narrow.within_training_range and narrow.value == 0.1 and narrow.trained_high == 0.01
    assert range_check(claim(), cond("b", 1, FULL, 0.8)).within_training_range
    banding = range_check(claim(perturbation="banding"), cond("c", 1, FULL, 0.8))
    assert banding.augment_field is None and not banding.within_training_range


def test_diff_names_exactly_what_varied() -> None:
    diff = diff_conditions([cond("a", 1, NARROW, 0.8), cond("b", 2, NARROW, 0.8), cond("c", 2, FULL, 0.8)])
    assert set(diff) == {"seed", "config_sha256", "augment.noise_std", "augment.p"}
    assert diff["seed"] == [1, 2]
    assert diff_conditions([cond("a", 1, NARROW, 0.8)]) == {}


def test_out_of_range_collapse_with_a_robust_full_range_control_is_retracted() -> None:
    original = cond("claimed", 1, NARROW, 0.8, 0.2)
    rederived = [cond("s1", 2, NARROW, 0.8, 0.25), cond("s2", 3, NARROW, 0.78, 0.3)]
    control = cond("full", 2, FULL, 0.8, 0.72)
    checks = [range_check(claim(), original), range_check(claim(), control)]
    verdict, reasons = collapse_verdict(claim(), original, rederived, control, checks, POLICY)
    assert verdict is Verdict.RETRACTED
    assert any("out-of-range evaluation" in r and "noise_std [0, 0.01]" in r for r in reasons)
    assert "artefact" in reasons[-1] and "0.080" in reasons[-1]


def test_collapse_branches_upheld_and_not_reproduced() -> None:
    original = cond("claimed", 1, NARROW, 0.8, 0.2)
    rederived = [cond("s1", 2, NARROW, 0.8, 0.25)]
    checks = [range_check(claim(), original)]
    still = cond("full", 2, FULL, 0.8, 0.3)
    verdict, reasons = collapse_verdict(
        claim(), original, rederived, still, [*checks, range_check(claim(), still)], POLICY
    )
    assert verdict is Verdict.UPHELD and "even when trained over the full range" in reasons[-1]
    inside = cond("claimed", 1, FULL, 0.8, 0.2)
    verdict, reasons = collapse_verdict(
        claim(), inside, [cond("s1", 2, FULL, 0.8, 0.3)], None, [range_check(claim(), inside)], POLICY
    )
    assert verdict is Verdict.UPHELD and "real vulnerability" in reasons[-1]
    verdict, reasons = collapse_verdict(
        claim(), inside, [cond("s1", 2, FULL, 0.8, 0.75)], None, [range_check(claim(), inside)], POLICY
    )
    assert verdict is Verdict.RETRACTED and "does not reproduce" in reasons[-1]
    verdict, reasons = collapse_verdict(
        claim(), original, [cond("s1", 2, NARROW, 0.8, 0.75)], None, checks, POLICY
    )
    assert verdict is Verdict.RETRACTED and "extrapolation" in reasons[-1]


def test_an_out_of_range_artefact_is_retracted_even_when_the_narrow_seeds_vary() -> None:
    original = cond("claimed", 1, NARROW, 0.8, 0.3)
    control = cond("full", 2, FULL, 0.8, 0.78)
    checks = [range_check(claim(), original), range_check(claim(), control)]
    verdict, reasons = collapse_verdict(
        claim(), original, [cond("s1", 2, NARROW, 0.8, 0.65)], control, checks, POLICY
    )
    assert verdict is Verdict.RETRACTED and reasons[0].startswith("0/1") and "artefact" in reasons[-1]


def test_win_verdict_counts_seeds_that_beat_the_reference() -> None:
    win = claim(ClaimKind.WIN, claimed=0.7, reference=0.6)
    up, _ = win_verdict(win, [cond("s1", 1, {}, 0.66), cond("s2", 2, {}, 0.58)], POLICY)
    down, reasons = win_verdict(
        win, [cond("s1", 1, {}, 0.55), cond("s2", 2, {}, 0.58), cond("s3", 3, {}, None)], POLICY
    )
    assert up is Verdict.UPHELD and down is Verdict.RETRACTED
    assert "0/2 re-derived seeds" in reasons[0]


def _cell(
    perturbation: str, severity: int, value: float, f1: float, drop: float, finding: str
) -> RobustnessCell:
    return RobustnessCell.model_validate(
        {
            "perturbation": perturbation,
            "severity": severity,
            "value": value,
            "within_training_range": False,
            "object_f1": f1,
            "object_recall": f1,
            "pixel_iou": f1,
            "object_f1_drop": drop,
            "finding": finding,
        }
    )


def _report(cells: list[RobustnessCell]) -> EvalReport:
    """An ``evaluate --robustness`` report with clean object F1 0.8 and these cells."""
    return EvalReport(
        model="m/model.onnx",
        data="d/dev",
        threshold=0.5,
        iou_match=0.1,
        metrics={"object_f1": 0.8},
        intervals={},
        worst_slice=SliceReport(min_support=20, worst=None, slices=[]),
        per_image={},
        training_range=unknown_range("no record"),
        outside_training_range=False,
        robustness=Robustness(training_config_found=True, collapse_drop=0.2, cells=cells),
    )


def test_collapse_claim_from_an_evaluate_report() -> None:
    report = _report(
        [
            _cell("lower_dose", 4, 0.06, 0.5, 0.3, "extrapolation"),
            _cell("lower_dose", 5, 0.1, 0.1, 0.7, "extrapolation"),
            _cell("shift", 1, 1, 0.79, 0.01, "ok"),
        ]
    )
    made = collapse_claim(report, "t1", "r1")
    assert made is not None and made.severity == 5 and made.effect == pytest.approx(0.7)
    assert collapse_claim(_report([]), "t1", "r1") is None
