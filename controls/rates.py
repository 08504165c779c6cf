"""The bookkeeping of honest controls: false wins, rates with intervals, selection effect, yield.

Definitions (ours, not published ones):

- a **win** is a run that beats the current best by the pre-registered rule;
- a **false win** is a promoted win whose paired difference on the sealed set has a point
  estimate <= 0, or whose whole 95 % interval lies below the margin (upper bound < margin);
- the **false-win rate** is false wins / wins, with Wilson and Clopper–Pearson intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from segfactory.stats import Interval, clopper_pearson_interval, expected_max_of_normals, wilson_interval

RATE_ALPHA = 0.05  # two-sided: every rate here carries a 95 % interval
SECONDS_PER_HOUR = 3600.0


def is_false_win(diff: Interval, margin: float = 0.0) -> bool:
    """A promoted win is false when its sealed paired difference (candidate - best) says so.

    ``diff`` is the paired difference on the sealed tier with its 95 % interval. It is false
    when the point estimate is <= 0, or when the whole interval lies below ``margin``.
    """
    return diff.estimate <= 0.0 or diff.high < margin


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n`` with both binomial intervals (95 %); ``n == 0`` gives ``None`` estimates."""

    k: int
    n: int
    wilson: Interval
    clopper_pearson: Interval

    @property
    def estimate(self) -> float | None:
        return self.k / self.n if self.n else None

    def as_dict(self) -> dict[str, object]:
        return {
            "k": self.k,
            "n": self.n,
            "estimate": self.estimate,
            "wilson": self.wilson.as_dict(),
            "clopper_pearson": self.clopper_pearson.as_dict(),
        }


class RateRecord(BaseModel):
    """A :class:`Rate` as the summaries keep it (``Rate.as_dict``'s keys): k of n, the estimate
    (None when n is 0) and both intervals."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int
    n: int
    estimate: float | None
    wilson: Interval
    clopper_pearson: Interval

    @classmethod
    def of(cls, rate: Rate) -> RateRecord:
        return cls(
            k=rate.k,
            n=rate.n,
            estimate=rate.estimate,
            wilson=rate.wilson,
            clopper_pearson=rate.clopper_pearson,
        )


def rate(k: int, n: int, alpha: float = RATE_ALPHA) -> Rate:
    """``k/n`` with Wilson and Clopper–Pearson intervals (raises ValueError unless 0 <= k <= n)."""
    return Rate(k, n, wilson_interval(k, n, alpha), clopper_pearson_interval(k, n, alpha))


def false_win_rate(false_wins: int, wins: int, alpha: float = RATE_ALPHA) -> Rate:
    """False wins / wins, with both intervals."""
    return rate(false_wins, wins, alpha)


@dataclass(frozen=True)
class SelectionEffect:
    """How far the best of ``n`` noisy runs sits above their mean, in score points."""

    n: int
    sigma: float  # the run-to-run standard deviation of the score (seeds only)
    expected_max_sigmas: float  # E[max of n N(0, 1)]
    expected_gain: float  # sigma * expected_max_sigmas: what selection alone buys

    def as_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "sigma": self.sigma,
            "expected_max_sigmas": self.expected_max_sigmas,
            "expected_gain": self.expected_gain,
        }


def selection_effect(scores: list[float]) -> SelectionEffect:
    """The expected maximum of ``len(scores)`` noisy runs, with sigma estimated from ``scores``.

    ``scores`` should come from runs that differ only by noise (the A/A runs); with fewer than
    two scores sigma is unknown and reported as 0. Raises ValueError on an empty list.
    """
    n = len(scores)
    if n == 0:
        raise ValueError("the selection effect needs at least one run")
    mean = sum(scores) / n
    sigma = (sum((s - mean) ** 2 for s in scores) / (n - 1)) ** 0.5 if n > 1 else 0.0
    em = expected_max_of_normals(n)
    return SelectionEffect(n=n, sigma=sigma, expected_max_sigmas=em, expected_gain=sigma * em)


@dataclass(frozen=True)
class Yield:
    """Promoted wins per device-hour, and LLM cost (tokens, seconds) per promoted win."""

    promoted: int
    device_seconds: float
    llm_tokens: int
    llm_seconds: float

    def as_dict(self) -> dict[str, float | int | None]:
        hours = self.device_seconds / SECONDS_PER_HOUR
        per = self.promoted or None
        return {
            "promoted": self.promoted,
            "device_seconds": self.device_seconds,
            "promoted_per_device_hour": self.promoted / hours if hours > 0 else None,
            "llm_tokens": self.llm_tokens,
            "llm_seconds": self.llm_seconds,
            "llm_tokens_per_promoted_win": self.llm_tokens / per if per else None,
            "llm_seconds_per_promoted_win": self.llm_seconds / per if per else None,
        }


__all__ = [
    "RATE_ALPHA",
    "Rate",
    "RateRecord",
    "SelectionEffect",
    "Yield",
    "false_win_rate",
    "is_false_win",
    "rate",
    "selection_effect",
]
