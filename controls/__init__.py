"""Honest controls: the equal-budget sweep, A/A false-win experiments, and the comparison of arms.

- ``controls.rates``: false wins, rates with Wilson and Clopper–Pearson intervals, the selection
  effect, yield;
- ``controls.pipeline``: one candidate through the agents' own run → gate → replicate → judge path;
- ``controls.space``: ``policies/search_space.yaml``, validated;
- ``controls.sweep``: the Optuna sweep; ``controls.aa``: A/A runs; ``controls.session``: the
  host services, gate and audit log a control run uses.
"""

from controls.pipeline import CandidateResult, CandidateServices, run_candidate
from controls.rates import Rate, SelectionEffect, Yield, false_win_rate, is_false_win, rate, selection_effect
from controls.space import SearchSpace, default_params, load_space

__all__ = ["CandidateResult", "CandidateServices", "Rate", "SearchSpace", "SelectionEffect", "Yield",
           "default_params", "false_win_rate", "is_false_win", "load_space", "rate", "run_candidate",
           "selection_effect"]
