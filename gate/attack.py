"""The holdout-reuse attack of Blum & Hardt (2015), against a naive evaluator and the gate's rule.

Setting: binary labels y in {0,1}^n on a holdout, 0/1 loss. The attacker knows nothing about y.
It draws ``k`` uniformly random label vectors, asks the evaluator about each, and outputs the
per-coordinate majority over the submissions the evaluator said were better than chance.

- **naive**: the evaluator returns each submission's holdout loss. "Better than chance" is
  loss < 0.5. The majority's holdout loss falls well below 0.5 (by ~sqrt(k/n)), while its loss
  on fresh labels stays 0.5: the difference is the leak.
- **gate**: the evaluator is the gate's coarse rule on confirm-a: WIN only when the seeded
  paired-bootstrap lower bound of (best loss - candidate loss) exceeds the margin, at most the
  confirm-a budget of answers per tier version (then BUDGET_EXHAUSTED), and a candidate is
  adopted only after a replicate WIN on confirm-b, where the replicate is the candidate
  retrained with a host-chosen seed (for a random-guess "trainer", a fresh random vector). The
  attacker's output is the majority over adopted submissions, else the current best (a constant
  predictor).
- **gate-a-only** (diagnostic): the majority over confirm-a WINs alone, inside the budget, as if
  no replicate were required; it shows what the budget alone leaves.

For each evaluator: holdout loss, fresh loss and the leak (fresh - holdout) with a t interval
over the repetitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from gate.win_rule import DEFAULT_WIN_RULE, load_win_rule
from segfactory.stats import t_interval

INTERVAL_LEVEL = 0.95  # two-sided level of the leak interval over repetitions


@dataclass(frozen=True)
class CoarseRule:
    """The gate's comparison and budgets, read from the pre-registered win rule."""

    n_boot: int
    alpha: float
    margin: float
    seed: int
    budget_a: int
    budget_b: int


def coarse_rule() -> CoarseRule:
    rule, _ = load_win_rule(DEFAULT_WIN_RULE)
    cmp = rule.comparison
    return CoarseRule(
        cmp.n_boot,
        cmp.alpha,
        cmp.margin,
        cmp.seed,
        rule.budgets.get("confirm-a", 0),
        rule.budgets.get("confirm-b", 0),
    )


def _majority(votes: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if len(votes) == 0:
        return rng.integers(0, 2, n).astype(bool)
    share = votes.mean(axis=0)
    return np.where(share == 0.5, rng.integers(0, 2, n).astype(bool), share > 0.5)


def _loss(pred: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(pred != labels))


class _Tier:
    """One holdout tier with the gate's seeded paired bootstrap and a query budget."""

    def __init__(self, labels: np.ndarray, best: np.ndarray, rule: CoarseRule, budget: int):
        n = len(labels)
        rng = np.random.default_rng(rule.seed)
        self.weights = rng.multinomial(n, np.full(n, 1.0 / n), size=rule.n_boot).astype(np.float32) / n
        self.labels, self.best_loss = labels, (best != labels).astype(np.float32)
        self.rule, self.left = rule, budget

    def wins(self, pred: np.ndarray) -> bool | None:
        """True (WIN) / False (NO_WIN), or None when the budget is spent (BUDGET_EXHAUSTED)."""
        if self.left <= 0:
            return None
        self.left -= 1
        diff = self.best_loss - (pred != self.labels).astype(np.float32)  # > 0: candidate better
        low = float(np.quantile(self.weights @ diff, self.rule.alpha / 2))
        return low > self.rule.margin


def _one_rep(n: int, k: int, rule: CoarseRule, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    holdout, fresh, confirm_b = (rng.integers(0, 2, n).astype(bool) for _ in range(3))
    subs = rng.integers(0, 2, (k, n)).astype(bool)
    naive = _majority(subs[np.array([_loss(s, holdout) < 0.5 for s in subs])], n, rng)
    best = np.zeros(n, dtype=bool)  # the current best: a constant predictor
    tier_a, tier_b = _Tier(holdout, best, rule, rule.budget_a), _Tier(confirm_b, best, rule, rule.budget_b)
    a_wins, adopted = [], []
    for sub in subs:
        answer = tier_a.wins(sub)
        if not answer:
            continue
        a_wins.append(sub)
        if tier_b.wins(rng.integers(0, 2, n).astype(bool)):  # replicate: host-chosen new seed
            adopted.append(sub)
    gate = _majority(np.array(adopted), n, rng) if adopted else best
    a_only = _majority(np.array(a_wins), n, rng) if a_wins else best
    return {
        name: (_loss(pred, holdout), _loss(pred, fresh))
        for name, pred in (("naive", naive), ("gate", gate), ("gate-a-only", a_only))
    }


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Leak(_Record):
    """Mean fresh-minus-holdout loss over repetitions with its t interval (a leak is > 0)."""

    estimate: float
    low: float
    high: float


class EvaluatorLosses(_Record):
    holdout_loss: float  # mean over repetitions
    fresh_loss: float
    leak: Leak


class AttackResult(_Record):
    """What ``attack boost`` measured (``--json`` prints it as it is)."""

    n: int
    k: int
    reps: int
    seed: int
    level: float  # two-sided level of the leak intervals
    budgets: dict[str, int]  # tier -> queries the rule allows
    evaluators: dict[str, EvaluatorLosses]  # naive, gate, gate-a-only


def _interval(values: np.ndarray) -> Leak:
    found = t_interval(values, INTERVAL_LEVEL)
    if found is None:
        mean = float(values.mean())
        return Leak(estimate=mean, low=mean, high=mean)
    return Leak(estimate=found.estimate, low=found.low, high=found.high)


def run_attack(n: int, k: int, reps: int, seed: int = 0, rule: CoarseRule | None = None) -> AttackResult:
    """Run the attack ``reps`` times; losses and the leak interval per evaluator."""
    rule = rule or coarse_rule()
    rng = np.random.default_rng(seed)
    runs = [_one_rep(n, k, rule, rng) for _ in range(reps)]
    evaluators = {}
    for name in ("naive", "gate", "gate-a-only"):
        holdout = np.array([r[name][0] for r in runs])
        fresh = np.array([r[name][1] for r in runs])
        evaluators[name] = EvaluatorLosses(
            holdout_loss=float(holdout.mean()),
            fresh_loss=float(fresh.mean()),
            leak=_interval(fresh - holdout),
        )
    return AttackResult(
        n=n,
        k=k,
        reps=reps,
        seed=seed,
        level=INTERVAL_LEVEL,
        budgets={"confirm-a": rule.budget_a, "confirm-b": rule.budget_b},
        evaluators=evaluators,
    )
