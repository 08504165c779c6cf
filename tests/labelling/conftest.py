"""Fixtures: a home whose current best is the stand-in model, a base version, unlabelled discs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.labelling import BASELINE_MODEL
from gate.intake import inspect_model
from gate.ledger import Ledger
from gate.setup import export_classical_baseline, init_gate
from segfactory.home import Home
from synthetic.splits import write_split
from synthetic.versions import DatasetVersion, create_version
from tests.gate.conftest import make_split, write_tier
from tests.runner import conftest as runner_fixtures
from tests.runner._standin import tiny_model
from tests.vision._data import draw

TIERS = ("confirm-a", "confirm-b", "sealed", "never-queried")
TIER_IMAGES = 16  # enough for the gate to time one reference verdict

scheduler = runner_fixtures.scheduler  # the runner tests' scheduler (a measured device profile)


@pytest.fixture
def home(tmp_home: Path) -> Home:
    """A home with held-back tiers, the classical detector registered at init (the gate calibrates
    its answer time on it) and a current best (the stand-in model) in the ledger."""
    home = Home(tmp_home)
    tmp_home.mkdir(parents=True)
    home.marker.write_text(json.dumps({"profile": "demo", "created": 0.0, "layout": 1}))
    for offset, tier in enumerate(TIERS):
        write_tier(home.vault, tier, *make_split(200 + offset, TIER_IMAGES))
    baseline = export_classical_baseline(home.root / BASELINE_MODEL, 32)
    assert baseline is not None
    init_gate(home.root, baseline)
    best = home.runs / "r0" / "tickets" / "t1" / "model.onnx"
    best.parent.mkdir(parents=True)
    best.write_bytes(tiny_model())  # prob = sigmoid(40 (x - 0.55)): the discs are ~0.7, background ~0.45
    (home.runs / "promotions.jsonl").write_text(
        json.dumps({"model": str(best), "run_id": "r0", "ticket_id": "t1"}) + "\n"
    )
    ledger = Ledger(home.vault / "ledger.sqlite")
    ledger.set_best(inspect_model(best).sha256, str(best), "promotion", "test")
    ledger.close()
    return home


@pytest.fixture
def discs(tmp_path: Path) -> Path:
    """Twelve 32-px images with bright discs, as a split folder (their masks are what a person would draw)."""
    images, masks, meta, defects = draw(12, 32, 5, radii=(2.0, 3.0), contrast=0.3, noise=0.01)
    write_split(tmp_path / "discs", images, masks, meta, defects, {"generator": "tests.discs"})
    return tmp_path / "discs"


@pytest.fixture
def unlabelled(discs: Path, tmp_path: Path) -> Path:
    """The same images without masks, as `data import --unlabelled` writes them."""
    from synthetic.splits import read_split

    split = read_split(discs)
    images = np.asarray(split.images)
    write_split(
        tmp_path / "unlabelled",
        images,
        np.zeros(images.shape, np.uint8),
        list(split.image_meta),
        [],
        {"generator": "import", "kind": "unlabelled"},
    )
    return tmp_path / "unlabelled"


@pytest.fixture
def base(home: Home, tmp_path: Path) -> DatasetVersion:
    """The labelled version a round joins: ``discs/v1``, 16 train and 8 dev images of 32 px."""
    for name, n, seed in (("train", 16, 0), ("dev", 8, 1)):
        images, masks, meta, defects = draw(n, 32, seed, radii=(2.0, 3.0), contrast=0.3, noise=0.01)
        write_split(tmp_path / "base" / name, images, masks, meta, defects, {"generator": "tests.discs"})
    return create_version(
        home.root, "discs", {s: tmp_path / "base" / s for s in ("train", "dev")}, approve_it=True
    )
