"""The gate's step in ``segfactory init`` (kept import-light: heavy modules load inside).

It pins the win rule and the scoring code into the vault, registers every tier version with its
budget, registers the classical baseline as the current best and the reference candidate the
served gate times its own verdicts with (``gate.calibrate``: the profile's base training config's
model, seeded), and, started as root, creates the users and gives the vault to
``segfactory-gate`` (set ``SEGFACTORY_NO_USER_SEPARATION=1`` to keep a root-owned vault, e.g.
for a throw-away test home).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from gate.setup import export_classical_baseline, export_reference, init_gate

if TYPE_CHECKING:  # the pinned copy holds no segfactory.home or segfactory.profiles
    from segfactory.home import Home
    from segfactory.profiles import Profile

NO_SEPARATION_ENV = "SEGFACTORY_NO_USER_SEPARATION"
BASELINE_FILE = "baseline-classical.onnx"
REFERENCE_FILE = "reference-candidate.onnx"  # beside the baseline; the vault keeps its own copy


class GateInit(BaseModel):
    """The gate's part of the ``init`` summary (its ``gate`` key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pinned_code_sha256: str
    baseline: str | None  # the classical baseline registered as the current best
    reference: str | None = None  # the reference candidate the gate times its verdicts with
    users_separated: bool  # the vault belongs to segfactory-gate (init ran as root)


def init_step(home: Home, profile: Profile, reference_config: Path | None = None) -> GateInit:
    """Gate set-up for a fresh home. ``reference_config``: the training config whose model is the
    reference candidate (the profile's base config on this machine); None: the baseline."""
    baseline = export_classical_baseline(home.root / "runs" / "baseline" / BASELINE_FILE, profile.image_size)
    reference = reference_model(home, profile, reference_config)
    separate = os.geteuid() == 0 and os.environ.get(NO_SEPARATION_ENV, "") in ("", "0")
    digest = init_gate(home.root, baseline, separate_users=separate, reference=reference)
    return GateInit(
        pinned_code_sha256=digest,
        baseline=str(baseline) if baseline else None,
        reference=str(reference or baseline) if (reference or baseline) else None,
        users_separated=separate,
    )


def reference_model(home: Home, profile: Profile, config: Path | None) -> Path | None:
    """The reference candidate exported for ``config`` (None without a config or without torch)."""
    if config is None:
        return None
    return export_reference(home.root / "runs" / "baseline" / REFERENCE_FILE, config, profile.image_size)
