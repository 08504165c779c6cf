"""Tiers (secret seeds, versions, CURRENT), dataset versions, perceptual hashes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from segfactory.errors import DataError, UsageError
from synthetic import generate
from synthetic.phash import (
    NEAR_NEIGHBOUR_BITS,
    hamming,
    min_distances,
    near_duplicates,
    near_neighbours,
    phash,
    shrink,
)
from synthetic.splits import read_split
from synthetic.tiers import build_tier, current_version, read_secret_seed, tier_path, versions
from synthetic.versions import approved, create_version, resolve


def test_build_tier_versions_and_secret(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    first = build_tier(vault, "confirm-a", 20, 32)
    second = build_tier(vault, "confirm-a", 20, 32)
    assert versions(vault, "confirm-a") == ["v1", "v2"]
    assert current_version(vault, "confirm-a") == "v2" and tier_path(vault, "confirm-a") == second
    secret = first / "secret.json"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert read_secret_seed(vault, "confirm-a", "v1") != read_secret_seed(vault, "confirm-a", "v2")
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["seed"] == "secret" and str(read_secret_seed(vault, "confirm-a", "v1")) not in json.dumps(
        manifest
    )
    a, b = read_split(first), read_split(second)
    assert not {m["sha256"] for m in a.image_meta} & {m["sha256"] for m in b.image_meta}
    with pytest.raises(DataError):
        build_tier(vault, "confirm-a", 5, 32, version="v1")
    with pytest.raises(UsageError):
        build_tier(vault, "confirm-z", 5, 32)
    assert not [p for p in (vault / "tiers" / "confirm-a").iterdir() if p.name.startswith(".")]


def test_dataset_versions_link_unchanged_splits(tmp_path: Path) -> None:
    train = generate(12, 24, 1, workers=1).write(tmp_path / "in" / "train")
    dev = generate(6, 24, 2, workers=1).write(tmp_path / "in" / "dev")
    v1 = create_version(tmp_path, "synthetic", {"train": train, "dev": dev}, approve_it=True)
    new_train = generate(12, 24, 3, workers=1).write(tmp_path / "in" / "train2")
    v2 = create_version(tmp_path, "synthetic", {"train": new_train, "dev": None}, parent="synthetic/v1")
    assert (v1.ref, v2.ref) == ("synthetic/v1", "synthetic/v2")
    assert v2.parent == v1.content_hash and v2.content_hash != v1.content_hash
    assert os.stat(v2.dev / "images.npy").st_ino == os.stat(v1.dev / "images.npy").st_ino
    assert v2.split_hashes["dev"] == v1.split_hashes["dev"]
    assert [v.ref for v in approved(tmp_path)] == ["synthetic/v1"] and not v2.approved
    assert resolve(tmp_path, "synthetic/v1").approved
    with pytest.raises(DataError):
        resolve(tmp_path, "synthetic/v9")
    with pytest.raises(UsageError):
        resolve(tmp_path, "../etc")


def test_phash_separates_copies_from_independent_draws() -> None:
    a = generate(300, 64, 101, workers=1).images
    b = generate(300, 64, 202, workers=1).images
    ha, hb = phash(a), phash(b)
    assert ha.shape == (300, 4) and phash(a[0]).shape == (4,)
    assert int(hamming(ha[0], phash(a[0].copy()))) == 0
    noisy = np.clip(a + np.random.default_rng(0).normal(0, 0.01, a.shape) + 0.03, 0, 1)
    assert (hamming(ha, phash(noisy)) <= NEAR_NEIGHBOUR_BITS).mean() > 0.99
    assert sorted(near_duplicates(a, noisy)) == [(i, i) for i in range(300)]
    assert near_duplicates(a, b) == []
    assert min_distances(ha, hb).min() > 0
    assert sorted(near_neighbours(ha[:5], ha)) == [(i, i) for i in range(5)]


def test_shrink_is_the_area_average_in_the_input_type() -> None:
    images = np.random.default_rng(3).random((5, 96, 64))
    expected = images.reshape(5, 32, 3, 32, 2).mean(axis=(2, 4))
    assert np.allclose(shrink(images), expected, rtol=0, atol=1e-12) and shrink(images).dtype == np.float64
    small = shrink(images.astype(np.float32))
    assert small.dtype == np.float32 and np.allclose(small, expected, rtol=0, atol=1e-6)
    assert shrink(images[:, :50, :50]).shape == (5, 32, 32)  # resampled when 32 does not divide a side
