"""The gate's step in ``segfactory init`` (kept import-light: heavy modules load inside).

It pins the win rule and the scoring code into the vault, registers every tier version with its
budget, registers the classical baseline as the current best, and, started as root, creates
the users and gives the vault to ``segfactory-gate`` (set ``SEGFACTORY_NO_USER_SEPARATION=1``
to keep a root-owned vault, e.g. for a throw-away test home).
"""

from __future__ import annotations

import os
from typing import Any

from gate.setup import export_classical_baseline, init_gate

NO_SEPARATION_ENV = "SEGFACTORY_NO_USER_SEPARATION"
BASELINE_FILE = "baseline-classical.onnx"


def init_step(home: Any, profile: Any, summary: dict[str, Any]) -> None:
    """Gate set-up for a fresh home; adds ``gate`` to the init summary."""
    baseline = export_classical_baseline(home.root / "runs" / "baseline" / BASELINE_FILE, profile.image_size)
    separate = os.geteuid() == 0 and os.environ.get(NO_SEPARATION_ENV, "") in ("", "0")
    digest = init_gate(home.root, baseline, separate_users=separate)
    summary["gate"] = {
        "pinned_code_sha256": digest,
        "baseline": str(baseline) if baseline else None,
        "users_separated": separate,
    }
