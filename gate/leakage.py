"""Leakage checks from host-side facts.

The gate resolves the training dataset version itself (never trusting a manifest a sandbox
wrote), requires it to be an approved version, hashes its train images and compares them with
every vault tier: an exact image hash match, or a perceptual-hash near neighbour (within
``synthetic.phash.NEAR_NEIGHBOUR_BITS``) confirmed by a pixel correlation of at least
``NEAR_CONFIRM_CORRELATION``, is a leak. The caller quarantines the run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gate import tiers
from synthetic.phash import near_neighbours, phash
from synthetic.splits import image_sha256, read_split
from synthetic.versions import resolve

MAX_LEAK_EXAMPLES = 3  # image ids quoted in a leak reason
# A perceptual-hash near neighbour is a leak only when the two images' pixel correlation is at
# least this. Measured on a demo home: distinct images (768 train x 400 confirm-a pairs) reach
# at most 0.944, and a phash near neighbour that was a different image had 0.855; a copy with
# small noise or a brightness shift stays above 0.99.
NEAR_CONFIRM_CORRELATION = 0.98


class LeakError(Exception):
    """The training data overlaps a held-back tier, or is not an approved version."""


def resolve_dataset(home_root: Path, ref: str) -> Path:
    """The train split folder of an approved dataset version ``NAME/vK`` (``synthetic.versions``)."""
    try:
        version = resolve(home_root, ref)
    except Exception as exc:  # UsageError (bad ref, traversal) or DataError (missing)
        raise LeakError(f"dataset version {ref!r} cannot be resolved: {exc}") from None
    if not version.approved:
        raise LeakError(f"dataset version {ref} is not approved in the registry; a person must approve it")
    return version.train


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.ravel() - a.mean(), b.ravel() - b.mean()
    denom = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y / denom) if denom > 0 else float(np.array_equal(a, b))


def _near_matches(train: np.ndarray, held: np.ndarray) -> int:
    """Train images with a phash near neighbour in ``held`` confirmed by pixel correlation."""
    pairs = near_neighbours(phash(train), phash(held))
    confirmed = {i for i, j in pairs if _correlation(train[i], held[j]) >= NEAR_CONFIRM_CORRELATION}
    return len(confirmed)


def check_training_data(home_root: Path, vault: Path, ref: str) -> None:
    """Raise LeakError when ``ref``'s train images overlap any vault tier (exactly or nearly)."""
    train = np.asarray(read_split(resolve_dataset(home_root, ref), mmap=True).images)
    train_hashes = {image_sha256(img) for img in train}
    for tier, version in tiers.built_tiers(vault).items():
        _, split = tiers.read_tier(vault, tier, version)
        held = np.asarray(split.images)
        exact = [i for i, img in enumerate(held) if image_sha256(img) in train_hashes]
        if exact:
            raise LeakError(
                f"{len(exact)} train images of {ref} equal {tier} v{version} images "
                f"(e.g. rows {exact[:MAX_LEAK_EXAMPLES]})"
            )
        near = _near_matches(train, held)
        if near:
            raise LeakError(
                f"{near} train images of {ref} are perceptual near-matches of {tier} v{version} "
                "(synthetic.phash.NEAR_NEIGHBOUR_BITS)"
            )
