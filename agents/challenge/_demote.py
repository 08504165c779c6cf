"""Demotion: a retracted win whose model is the gate's current best moves the best back.

The gate does the move itself (``POST /retract``, ``gate.client.GateClient.retract``) and
records it in its ledger as kind ``retraction`` (trust rule 5: the best moves only on a promotion
or a recorded retraction); the host never writes the ledger. Without a client at hand, the
home's gate is started for the one call (``gate.client.running_gate``).
"""

from __future__ import annotations

from typing import Any

from gate.client import running_gate
from segfactory.errors import GateError
from segfactory.home import Home


def demote_if_best(home: Home, model_sha256: str, reason: str, gate: Any = None) -> str | None:
    """Ask the gate to move the best back past ``model_sha256``; None when that model is not the best.

    ``gate`` is a ``GateClient`` (anything with ``retract(sha256, reason)``); GateError when no
    gate can be reached or the model is the only best ever recorded.
    """
    if gate is not None:
        moved: str | None = gate.retract(model_sha256, reason)
        return moved
    if not home.vault.exists():  # the vault itself is the gate's: only its own folder entry is looked at
        raise GateError(
            f"no gate vault at {home.vault}; run `segfactory init` (a retraction must reach the "
            "gate's ledger)"
        )

    with running_gate(home.root) as client:
        return client.retract(model_sha256, reason)
