"""Small split folders drawn with numpy: bright discs of known area on a noisy background."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from synthetic.splits import image_sha256, write_split


def draw(
    n: int,
    size: int,
    seed: int,
    radii: tuple[float, ...] = (0.8, 1.5, 3.0),
    max_voids: int = 3,
    contrast: float = 0.25,
    noise: float = 0.03,
) -> tuple[np.ndarray, np.ndarray, list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    images = np.empty((n, size, size), dtype=np.float32)
    masks = np.zeros((n, size, size), dtype=np.uint8)
    meta, defects = [], []
    for i in range(n):
        img = 0.4 + 0.1 * rng.random() + rng.normal(0, noise, (size, size))
        for _ in range(int(rng.integers(0, max_voids + 1))):
            r = float(rng.choice(radii))
            cy, cx = rng.uniform(r + 1, size - r - 1, 2)
            disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            if not disc.any() or masks[i][disc].any():
                continue
            masks[i][disc] = 1
            img[disc] += contrast
            ys, xs = np.nonzero(disc)
            defects.append(
                {
                    "image_id": f"img{i:05d}",
                    "area": int(disc.sum()),
                    "diameter": 2 * r,
                    "contrast": contrast,
                    "thickness": 10.0,
                    "noise": noise,
                    "shape": "pore",
                    "bbox": [int(ys.min()), int(xs.min()), int(ys.max()) + 1, int(xs.max()) + 1],
                    "edge": False,
                }
            )
        images[i] = np.clip(img, 0, 1)
        meta.append(
            {"id": f"img{i:05d}", "sha256": image_sha256(images[i]), "dose": float(rng.choice([500, 2000]))}
        )
    return images, masks, meta, defects


def make_version(root: Path, n_train: int, n_dev: int, size: int, seed: int = 0, **kw: object) -> Path:
    """A dataset version folder (train/ and dev/) of disc images."""
    for name, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1)):
        images, masks, meta, defects = draw(n, size, s, **kw)  # type: ignore[arg-type]
        write_split(root / name, images, masks, meta, defects, {"generator": "tests.discs", "seed": s})
    return root
