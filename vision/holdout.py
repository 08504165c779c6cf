"""The images carved from a train split to choose things on (an epoch, a threshold), never dev.

An image is held out when a number drawn from its own content hash (``images.jsonl``'s
``sha256``) and a seed falls below ``fraction``. The seed is never a ticket's, so every ticket,
replicate and packaging step on the same data holds out the same images, and an image keeps its
side in every dataset version that holds it (a top-up appends images, a curation removes some;
neither moves the others). The share held out is ``fraction`` in expectation, not exactly, and at
least one image when ``fraction`` is above 0. numpy only: the host may call it without torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

# The factory's carve: what the runner sets for every ticket of its own trainer (the epoch kept is
# chosen on it) and what a package chooses its threshold on, so no member trained on those images.
CARVE_FRACTION = 0.1
CARVE_SEED = 0


def draw(image_hash: str, seed: int) -> float:
    """A number in [0, 1) fixed by the image's content hash and the seed."""
    digest = hashlib.sha256(f"{seed}:{image_hash}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def held_out(image_hashes: Sequence[str], fraction: float, seed: int) -> list[int]:
    """Indices (in split order) of the images held out: none when ``fraction`` is 0."""
    if fraction <= 0 or not image_hashes:
        return []
    draws = np.array([draw(h, seed) for h in image_hashes])
    return np.flatnonzero(draws < fraction).tolist() or [int(np.argmin(draws))]


__all__ = ["draw", "held_out"]
