"""The challenge policy: what trips an automatic challenge, and a malformed policy file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.challenge import ChallengePolicy, auto_challenge_needed, load_policy
from segfactory.errors import PolicyError


def test_the_shipped_policy_loads() -> None:
    policy = load_policy()
    assert policy.auto_open_interval_widths == 3.0
    assert policy.default_seeds <= policy.max_seeds


def test_an_effect_far_beyond_the_noise_floor_opens_a_challenge() -> None:
    policy = ChallengePolicy(auto_open_interval_widths=3.0)
    far = auto_challenge_needed(0.35, 0.40, 0.46, policy)  # a 0.35 collapse against a 0.06-wide interval
    near = auto_challenge_needed(0.10, 0.40, 0.46, policy)
    assert far.needed and far.widths == pytest.approx(0.35 / 0.06)
    assert not near.needed and "within" in near.reason
    assert auto_challenge_needed(-0.35, 0.40, 0.46, policy).needed  # a drop counts like a gain


def test_zero_width_interval_and_reversed_interval() -> None:
    assert auto_challenge_needed(0.01, 0.5, 0.5).needed
    assert not auto_challenge_needed(0.0, 0.5, 0.5).needed
    with pytest.raises(ValueError, match="low"):
        auto_challenge_needed(0.1, 0.6, 0.5)


def test_a_malformed_policy_file_is_a_policy_error(tmp_path: Path) -> None:
    bad = tmp_path / "challenge.yaml"
    bad.write_text("max_seeds: -1\n")
    with pytest.raises(PolicyError, match="invalid challenge policy"):
        load_policy(bad)
    bad.write_text("surprise: 1\n")
    with pytest.raises(PolicyError):
        load_policy(bad)
