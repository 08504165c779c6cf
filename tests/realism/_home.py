"""A tiny home for the top-up tests: an approved ``synthetic/v1`` of 32x32 images, demo profile."""

from __future__ import annotations

import json
import time
from pathlib import Path

from synthetic import generate
from synthetic.versions import create_version


def tiny_home(root: Path, n_train: int = 160, n_dev: int = 48) -> Path:
    root.mkdir(parents=True)
    for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2)):
        generate(n, 32, seed, workers=1).write(root.parent / "home-src" / name)
    create_version(
        root, "synthetic", {s: root.parent / "home-src" / s for s in ("train", "dev")}, approve_it=True
    )
    (root / "home.json").write_text(
        json.dumps({"created": time.time(), "layout_version": 1, "profile": "demo"})
    )
    return root
