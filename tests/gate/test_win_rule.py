"""The pre-registered win rule: validated, hashed, pinned; the comparison decides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gate.win_rule import (
    DEFAULT_WIN_RULE,
    View,
    WinRule,
    check_pinned,
    decide,
    load_win_rule,
    perturbed_views,
)
from segfactory.errors import PolicyError
from tests.gate.conftest import make_split


def test_shipped_rule_is_valid() -> None:
    rule, digest = load_win_rule(DEFAULT_WIN_RULE)
    assert rule.primary_metric == "object_f1" and len(digest) == 64
    assert rule.budgets["confirm-a"] > 0 and rule.milestone_quota["sealed"] > 0


def test_changed_rule_breaks_the_pin(tmp_path: Path) -> None:
    copy = tmp_path / "win_rule.yaml"
    copy.write_bytes(DEFAULT_WIN_RULE.read_bytes())
    _, digest = load_win_rule(copy)
    check_pinned(copy, digest)
    copy.write_text(copy.read_text().replace("margin: 0.0", "margin: -0.5"))
    with pytest.raises(PolicyError):  # an invalid (negative) margin, and a changed hash
        check_pinned(copy, digest)
    copy.write_text(DEFAULT_WIN_RULE.read_text() + "\n# harmless comment\n")
    with pytest.raises(PolicyError, match="changed since it was pinned"):
        check_pinned(copy, digest)


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "rule.yaml"
    bad.write_text(DEFAULT_WIN_RULE.read_text() + "\nsneaky: 1\n")
    with pytest.raises(PolicyError, match="invalid"):
        load_win_rule(bad)


def _views(
    rule: WinRule, images: np.ndarray, masks: np.ndarray, best_thr: float, cand_thr: float
) -> list[View]:
    """Two thresholding "models" scored on each of the rule's perturbed views."""
    return [
        ((x > best_thr).astype(np.float32), (x > cand_thr).astype(np.float32), m)
        for x, m in perturbed_views(images, masks, rule)
    ]


def test_decide_wins_only_when_clearly_better() -> None:
    rule, _ = load_win_rule(DEFAULT_WIN_RULE)
    images, masks = make_split(1, 120)
    weak = (images > 0.75).astype(np.float32)  # finds only the strong voids
    good = (images > 0.45).astype(np.float32)
    assert decide(weak, good, masks, rule, _views(rule, images, masks, 0.75, 0.45)).win
    assert not decide(good, good, masks, rule, _views(rule, images, masks, 0.45, 0.45)).win
    assert not decide(good, weak, masks, rule, _views(rule, images, masks, 0.45, 0.75)).win
    views = _views(rule, images, masks, 0.75, 0.45)
    assert decide(weak, good, masks, rule, views) == decide(weak, good, masks, rule, views)  # seeded


def test_the_shipped_rule_checks_in_range_perturbations() -> None:
    rule, _ = load_win_rule(DEFAULT_WIN_RULE)
    assert {p.name for p in rule.robust.perturbations} == {"lower_dose", "detector_blur", "gain_drift"}
    images, masks = make_split(2, 16)
    first, again = perturbed_views(images, masks, rule), perturbed_views(images, masks, rule)
    assert len(first) == 3 and all(np.array_equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
    assert all(not np.array_equal(x, images) and x.shape == images.shape for x, _ in first)


def test_a_gain_that_collapses_under_a_perturbation_is_no_win() -> None:
    """Better on clean images, but worse than the best on one in-range perturbation: not robust."""
    rule, _ = load_win_rule(DEFAULT_WIN_RULE)
    images, masks = make_split(1, 120)
    weak, good = (images > 0.75).astype(np.float32), (images > 0.45).astype(np.float32)
    views = _views(rule, images, masks, 0.75, 0.45)
    best_blur, _, blur_masks = views[1]
    views[1] = (best_blur, np.zeros_like(best_blur), blur_masks)  # the candidate finds nothing when blurred
    decision = decide(weak, good, masks, rule, views)
    assert decision.low > rule.comparison.margin  # the primary comparison alone would be a WIN
    assert not decision.win and decision.worst_perturbation_drop > rule.robust.max_perturbation_drop
    assert "worst perturbation object_f1 drop" in decision.reason
    with pytest.raises(ValueError, match="perturbed views"):
        decide(weak, good, masks, rule, views[:1])


def test_an_unknown_perturbation_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "rule.yaml"
    bad.write_text(DEFAULT_WIN_RULE.read_text().replace("name: gain_drift", "name: sunshine"))
    with pytest.raises(PolicyError, match="invalid"):
        load_win_rule(bad)
