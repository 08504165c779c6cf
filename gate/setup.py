"""Gate steps of ``segfactory init`` and the person-run tier commands (rotate, add-real).

``init_gate(home_root, baseline, reference)`` pins the win rule in a fresh ledger, registers every
built tier version with its budget, registers the classical baseline as the current best and the
reference candidate the served gate times its verdicts with (``gate.calibrate``).
"""

from __future__ import annotations

import os
from pathlib import Path

from gate import tiers, users
from gate.calibrate import META_REFERENCE, REFERENCE_DIR
from gate.core import Gate
from gate.intake import inspect_own_model
from gate.pinned import META_PINNED, pin_code
from gate.win_rule import DEFAULT_WIN_RULE
from segfactory.errors import DataError, UsageError
from segfactory.files import write_atomic
from synthetic import tiers as synth_tiers
from synthetic.splits import read_split, write_split

VAULT_MODE = 0o700  # the vault: its owner (the gate's user) only
# The reference candidate's weights are drawn from this seed: what a verdict costs depends on the
# architecture, not on the weights, and a fixed seed makes the file the same for every home of a
# profile on one torch version.
REFERENCE_SEED = 0


def init_gate(
    home_root: Path,
    baseline: Path | None = None,
    win_rule: Path = DEFAULT_WIN_RULE,
    separate_users: bool = False,
    reference: Path | None = None,
) -> str:
    """Pin the win rule and the scoring code, register tiers and (optionally) the baseline as best
    and the reference candidate (``reference``; the baseline itself when not given, as for a home
    whose candidates cost what its baseline costs).

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
        reference = reference if reference is not None else baseline
        if reference is not None and gate.ledger.get_meta(META_REFERENCE) is None:
            register_reference(gate, reference)
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


def register_reference(gate: Gate, model: Path) -> str:
    """Keep a model this process built (init's, never an agent's) as the vault's reference candidate."""
    checked = inspect_own_model(model)
    target = gate.vault / REFERENCE_DIR / f"{checked.sha256}.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, checked.data)
    gate.ledger.set_meta(META_REFERENCE, checked.sha256)
    gate.ledger.queue_event("gate.reference", {"model_sha256": checked.sha256})
    return checked.sha256


def export_reference(path: Path, config: Path, size: int) -> Path | None:
    """Export the model of training config ``config`` with seeded weights, for images of ``size``
    pixels a side; None while vision cannot build models (no torch)."""
    if path.is_file():
        return path
    try:
        import torch  # deferred: torch, at init only

        from vision.config import load_config  # deferred: torch, at init only
        from vision.export import export_onnx  # deferred: torch, at init only
        from vision.models import PLAIN_UNET, build_model  # deferred: torch, at init only
        from vision.plain_unet import stages_for  # deferred: torch, at init only
    except ImportError:
        return None
    spec = load_config(config)
    stages = spec.model.stages
    if spec.model.name == PLAIN_UNET and stages is None:  # as training sizes it from its patch
        stages = stages_for(int(spec.sampling.crop or size))
    torch.manual_seed(REFERENCE_SEED)
    model = build_model(spec.model.name, spec.model.decoder_width, stages=stages)
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
