"""The pre-registered win rule: validated, hashed, pinned; the comparison decides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gate.win_rule import DEFAULT_WIN_RULE, check_pinned, decide, load_win_rule
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


def test_decide_wins_only_when_clearly_better() -> None:
    rule, _ = load_win_rule(DEFAULT_WIN_RULE)
    images, masks = make_split(1, 120)
    weak = (images > 0.75).astype(np.float32)  # finds only the strong voids
    good = (images > 0.45).astype(np.float32)
    assert decide(weak, good, masks, rule).win
    assert not decide(good, good, masks, rule).win
    assert not decide(good, weak, masks, rule).win
    first, second = decide(weak, good, masks, rule), decide(weak, good, masks, rule)
    assert first == second  # seeded: deterministic
