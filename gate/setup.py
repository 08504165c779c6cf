"""Gate steps of ``segfactory init`` and the person-run tier commands (rotate, add-real).

``init_gate(home_root, baseline)`` pins the win rule in a fresh ledger, registers every built
tier version with its budget, and registers the classical baseline as the current best.
"""

from __future__ import annotations

import os
from pathlib import Path

from gate import tiers, users
from gate.core import Gate
from gate.pinned import META_PINNED, pin_code
from gate.win_rule import DEFAULT_WIN_RULE
from segfactory.errors import DataError, UsageError
from synthetic import tiers as synth_tiers
from synthetic.splits import read_split, write_split

VAULT_MODE = 0o700  # the vault: its owner (the gate's user) only


def init_gate(
    home_root: Path,
    baseline: Path | None = None,
    win_rule: Path = DEFAULT_WIN_RULE,
    separate_users: bool = False,
) -> str:
    """Pin the win rule and the scoring code, register tiers and (optionally) the baseline as best.

    With ``separate_users`` (``segfactory init`` as root) the users are created and the vault is
    given to ``segfactory-gate`` (mode 0700). Returns the pinned code digest.
    """
    vault = Path(home_root) / "vault"
    vault.mkdir(parents=True, exist_ok=True)
    os.chmod(vault, VAULT_MODE)
    gate = Gate(vault, win_rule, home_root=Path(home_root))
    try:
        gate.pin_win_rule()
        digest, _ = pin_code(vault)
        gate.ledger.set_meta(META_PINNED, digest)
        if baseline is not None and gate.ledger.current_best() is None:
            gate.set_best(baseline, "init", "classical baseline registered at init", own=True)
    finally:
        gate.ledger.close()
    if separate_users:
        users.ensure_users()
        users.lock_vault(vault)
        users.lock_home(Path(home_root))
    return digest


def export_classical_baseline(path: Path, size: int) -> Path | None:
    """Export ``baseline-classical`` to ONNX at ``path``; None while vision has no classical model."""
    if path.is_file():
        return path
    try:
        from vision.export import export_onnx  # deferred: torch, at init only
        from vision.models import CLASSICAL, build_model  # deferred: torch, at init only

        model = build_model(CLASSICAL)
    except ImportError:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(export_onnx(model, path, (size, size)))


def relock(vault: Path) -> None:
    """After a person's root-side change (rotate, add-real), give new files back to the gate."""
    if users.is_root() and users.vault_is_separated(vault):
        users.lock_vault(vault)


def add_real(gate: Gate, source: Path) -> int:
    """Copy a labelled real split folder into the vault as a new real-holdout version."""
    split = read_split(source)
    if not split.masks.any():
        raise DataError(f"{source} has no labelled voids; real-holdout needs labels")
    version = (tiers.current_version(gate.vault, "real-holdout") or 0) + 1
    target = tiers.tier_dir(gate.vault, "real-holdout", version)
    manifest = {"source": "real", "parent": split.content_hash}
    write_split(target, split.images, split.masks, split.image_meta, split.defects, manifest)
    (target.parent / tiers.CURRENT_FILE).write_text(f"v{version}\n")
    gate.ledger.add_tier_version("real-holdout", version, 0)  # no query budget: milestones only
    gate.ledger.queue_event("gate.add_real", {"version": version, "n": len(split)})
    return version


def build_fresh(vault: Path, tier: str, *, workers: int | None = None) -> int:
    """A fresh secret-seeded version of ``tier`` through ``synthetic.tiers``. ``workers`` as in
    ``synthetic.generate``: a served gate (a threaded process) passes 1, since forking it can deadlock."""
    current = tiers.current_version(vault, tier)
    if current is None:
        raise UsageError(f"tier {tier} was never built; `segfactory init` builds it")
    split = read_split(tiers.tier_dir(vault, tier, current), mmap=True)
    size = int(split.images.shape[1])
    synth_tiers.build_tier(vault, tier, len(split), size, workers=workers)
    version = tiers.current_version(vault, tier)
    assert version is not None
    return version
