"""``policies/challenge.yaml``: how many seeds, how much device time, and what trips a challenge."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from segfactory.errors import PolicyError

POLICY_FILE = Path(__file__).resolve().parents[2] / "policies" / "challenge.yaml"


class ChallengePolicy(BaseModel):
    """Thresholds of the host-side challenge policy (see the YAML for each field's meaning)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    default_seeds: int = Field(default=3, ge=1)
    max_seeds: int = Field(default=8, ge=1)
    max_device_seconds: float = Field(default=3600.0, gt=0)  # past it: LimitExceeded before anything runs
    auto_open_interval_widths: float = Field(default=3.0, gt=0)
    win_uphold_fraction: float = Field(default=0.5, gt=0, le=1)
    win_margin: float = Field(default=0.0, ge=0)
    collapse_drop: float = Field(default=0.2, gt=0, le=1)
    collapse_uphold_fraction: float = Field(default=0.5, gt=0, le=1)
    control_augment_p: float = Field(default=0.8, gt=0, le=1)


def load_policy(path: Path = POLICY_FILE) -> ChallengePolicy:
    """The challenge policy; the defaults when the file is absent; a malformed file is a PolicyError."""
    if not path.is_file():
        return ChallengePolicy()
    try:
        return ChallengePolicy.model_validate(yaml.safe_load(path.read_text()) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise PolicyError(f"{path}: invalid challenge policy ({exc}); fix the file") from None


class Trip(BaseModel):
    """Whether a result trips the policy, and why (for the audit record)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    needed: bool
    reason: str
    widths: float  # |effect| in bootstrap-interval widths (inf for a zero-width interval)


def auto_challenge_needed(
    effect: float, interval_low: float, interval_high: float, policy: ChallengePolicy | None = None
) -> Trip:
    """A result whose |effect| exceeds ``auto_open_interval_widths`` bootstrap-interval widths.

    ``effect`` is an improvement (candidate − best) or a collapse (clean − perturbed), and the
    interval is the bootstrap interval of that effect (or of the metric it is measured against):
    its width is the noise floor. The loop calls this for every claimed win or finding and opens
    a challenge when ``needed``; the judge has no say.
    """
    policy = policy or load_policy()
    if interval_high < interval_low:
        raise ValueError(f"interval low {interval_low} > high {interval_high}")
    width = interval_high - interval_low
    widths = abs(effect) / width if width > 0 else (float("inf") if effect else 0.0)
    needed = widths > policy.auto_open_interval_widths
    word = "exceeds" if needed else "is within"
    return Trip(
        needed=needed,
        widths=widths,
        reason=f"|effect| {abs(effect):.4f} is {widths:.1f} interval widths ({width:.4f}); {word} "
        f"the policy's {policy.auto_open_interval_widths:g}",
    )
