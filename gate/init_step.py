"""The gate's step in ``segfactory init`` (kept import-light: heavy modules load inside).

It pins the win rule and the scoring code into the vault, registers every tier version with its
budget, registers the classical baseline as the current best, and, started as root, creates
the users and gives the vault to ``segfactory-gate`` (set ``SEGFACTORY_NO_USER_SEPARATION=1``
to keep a root-owned vault, e.g. for a throw-away test home).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from gate.setup import export_classical_baseline, init_gate

if TYPE_CHECKING:  # the pinned copy holds no segfactory.home or segfactory.profiles
    from segfactory.home import Home
    from segfactory.profiles import Profile

NO_SEPARATION_ENV = "SEGFACTORY_NO_USER_SEPARATION"
BASELINE_FILE = "baseline-classical.onnx"


class GateInit(BaseModel):
    """The gate's part of the ``init`` summary (its ``gate`` key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pinned_code_sha256: str
    baseline: str | None  # the classical baseline registered as the current best
    users_separated: bool  # the vault belongs to segfactory-gate (init ran as root)


def init_step(home: Home, profile: Profile) -> GateInit:
    """Gate set-up for a fresh home."""
    baseline = export_classical_baseline(home.root / "runs" / "baseline" / BASELINE_FILE, profile.image_size)
    separate = os.geteuid() == 0 and os.environ.get(NO_SEPARATION_ENV, "") in ("", "0")
    digest = init_gate(home.root, baseline, separate_users=separate)
    return GateInit(
        pinned_code_sha256=digest, baseline=str(baseline) if baseline else None, users_separated=separate
    )
