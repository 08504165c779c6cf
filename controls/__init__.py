"""Honest controls: the equal-budget sweep, A/A false-win experiments, and the comparison of arms.

- ``controls.rates``: false wins, rates with Wilson and Clopper–Pearson intervals, the selection
  effect, yield;
- ``controls.pipeline``: one candidate through the agents' own run → gate → replicate → judge path;
- ``agents.space``: ``policies/search_space.yaml``, validated;
- ``controls.sweep``: the Optuna sweep; ``controls.aa``: A/A runs; ``controls.compare``: the arms
  at equal device-seconds; ``controls.session``: the host services, gate and audit log they use.

The names below are imported on first use, so that the CLI can refuse bad input before scipy,
Optuna or the agents package are loaded.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "CandidateResult": "controls.pipeline",
    "CandidateServices": "controls.pipeline",
    "run_candidate": "controls.pipeline",
    "Rate": "controls.rates",
    "SelectionEffect": "controls.rates",
    "Yield": "controls.rates",
    "false_win_rate": "controls.rates",
    "is_false_win": "controls.rates",
    "rate": "controls.rates",
    "selection_effect": "controls.rates",
    "SearchSpace": "agents.space",
    "default_params": "agents.space",
    "load_space": "agents.space",
    "run_sweep": "controls.sweep",
    "check_sweep": "controls.sweep",
    "run_aa": "controls.aa",
    "run_compare": "controls.compare",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'controls' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)
