"""Small gate homes: tiny void images in held-back tiers, a baseline, a better candidate."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gate import tiers
from gate.core import Gate
from gate.setup import init_gate
from synthetic.splits import image_sha256, write_split
from tests.gate import models

SIZE = 32  # pixels per side
STRONG_VOID = 0.78  # the baseline's threshold: voids brighter than this are "strong"
TIER_SIZES = {"confirm-a": 160, "confirm-b": 160, "sealed": 120, "never-queried": 80}


def make_split(
    seed: int, n: int, size: int = SIZE, strong_labels: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Images with 1-4 small bright voids of varied contrast.

    ``strong_labels`` keeps the images and labels only the high-contrast voids: a vault with the
    same images but other held-back labels (under which the baseline is the better model).
    """
    rng = np.random.default_rng(seed)
    images = (0.3 + 0.03 * rng.standard_normal((n, size, size))).astype(np.float32)
    masks = np.zeros((n, size, size), np.uint8)
    yy, xx = np.mgrid[:size, :size]
    for i in range(n):
        for _ in range(int(rng.integers(1, 5))):
            cy, cx = rng.integers(3, size - 3, 2)
            radius = float(rng.uniform(0.8, 2.5))
            disk = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
            images[i][disk] = 0.3 + float(rng.uniform(0.2, 0.6))
            masks[i][disk] = 1
    images = np.clip(images, 0, 1)
    if strong_labels:
        masks = (masks.astype(bool) & (images > STRONG_VOID)).astype(np.uint8)
    return images, masks


def write_tier(vault: Path, tier: str, images: np.ndarray, masks: np.ndarray, version: int = 1) -> Path:
    meta = [{"id": f"{tier}-{i}", "sha256": image_sha256(img)} for i, img in enumerate(images)]
    target = write_split(tiers.tier_dir(vault, tier, version), images, masks, meta, [], {"generator": "test"})
    (target.parent / tiers.CURRENT_FILE).write_text(f"v{version}\n")
    return target


def build_home(root: Path, strong_labels: bool = False, separate_users: bool = False) -> tuple[Path, Path]:
    """A home with every tier built and the baseline registered; returns (home, baseline path)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "home.json").write_text('{"profile": "test"}')
    vault = root / "vault"
    for offset, (tier, n) in enumerate(TIER_SIZES.items()):
        images, masks = make_split(100 + offset, n, strong_labels=strong_labels)
        write_tier(vault, tier, images, masks)
    baseline = models.save(
        models.threshold_model(bias=-STRONG_VOID), root.parent / f"{root.name}-baseline.onnx"
    )
    init_gate(root, baseline, separate_users=separate_users)
    return root, baseline


def vault_hashes(vault: Path) -> dict[str, str]:
    """sha256 of every held-back tier file (what must not change under attack)."""
    return {
        str(p.relative_to(vault)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((vault / "tiers").rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def gate_home(tmp_path: Path) -> tuple[Path, Path]:
    return build_home(tmp_path / "home")


@pytest.fixture
def gate(gate_home: tuple[Path, Path]) -> Iterator[Gate]:
    home, _ = gate_home
    g = Gate(home / "vault", home_root=home)
    yield g
    g.ledger.close()


@pytest.fixture
def better_model(tmp_path: Path) -> Path:
    return models.save(models.threshold_model(bias=-0.45), tmp_path / "better.onnx")
