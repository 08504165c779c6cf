"""Demotion: a retracted win whose model is the gate's current best moves the best back.

The move is recorded in the gate's ledger as kind ``retraction`` (trust rule 5: the best moves
only on a promotion or a recorded retraction) through ``gate.setup.register_best``, the
in-process path a root orchestrator uses for promotions too.
"""

from __future__ import annotations

from pathlib import Path

from segfactory.errors import GateError
from segfactory.home import Home

LEDGER_FILE = "ledger.sqlite"


def demote_if_best(home: Home, model_sha256: str, reason: str) -> str | None:
    """Move the best back to the last earlier best that is not this model; None when it is not the best."""
    from gate.ledger import Ledger
    from gate.setup import register_best

    path = home.vault / LEDGER_FILE
    if not path.is_file():
        raise GateError(f"no gate ledger at {path}; run `segfactory init` (a retraction must reach the ledger)")
    ledger = Ledger(path)
    try:
        current = ledger.current_best()
        if current is None or current["model_sha256"] != model_sha256:
            return None
        earlier = [b for b in ledger.best_history() if b["model_sha256"] != model_sha256]
    finally:
        ledger.close()
    if not earlier:
        raise GateError(f"the retracted model {model_sha256[:12]}… is the only best ever recorded; nothing to "
                        "move back to")
    return register_best(home.root, Path(earlier[-1]["model_path"]), "retraction", reason)
