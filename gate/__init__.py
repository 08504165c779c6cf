"""The gate: a locked evaluator.

Public API (loaded lazily, so importing ``gate`` stays cheap):

- ``Gate`` (gate.core): the decision procedure; ``GateClient``, ``running_gate``, ``home_gate`` (gate.client);
- ``score_model``, ``ScoringError`` (gate.scorer): the confined scorer, also for host dev metrics;
- ``inspect_model``, ``IntakeError`` (gate.intake): hardened ONNX intake;
- ``Ledger`` (gate.ledger); ``load_win_rule``, ``WinRule`` (gate.win_rule);
- ``run_attack`` (gate.attack); ``boot_code`` (gate._serve_pinned): the program that starts the
  service from its pinned copy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Gate": "gate.core",
    "GateClient": "gate.client",
    "running_gate": "gate.client",
    "home_gate": "gate.client",
    "score_model": "gate.scorer",
    "ScoringError": "gate.scorer",
    "inspect_model": "gate.intake",
    "IntakeError": "gate.intake",
    "Ledger": "gate.ledger",
    "load_win_rule": "gate.win_rule",
    "WinRule": "gate.win_rule",
    "run_attack": "gate.attack",
    "boot_code": "gate._serve_pinned",  # the service entry point run from the pinned copy
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gate' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
