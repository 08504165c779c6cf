"""``segfactory init``: layout, approved dataset, secret-seeded tiers, idempotence, disjointness."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli.init import DEV_SEED, TRAIN_SEED
from segfactory.records import sha256_file
from synthetic import generate
from synthetic.phash import near_duplicates
from synthetic.splits import read_split
from synthetic.tiers import TIERS, read_secret_seed, tier_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("init") / "home"
    proc = subprocess.run(
        [sys.executable, "-m", "segfactory", "init", "--profile", "demo", "--home", str(home), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.returncode == 0, proc.stderr
    return home, json.loads(proc.stdout)


def test_layout_and_summary(demo_home: tuple[Path, dict[str, Any]]) -> None:
    home, summary = demo_home
    assert summary["existing"] is False and summary["profile"] == "demo"
    assert [row["tier"] for row in summary["tiers"]] == list(TIERS)
    assert {row["count"] for row in summary["tiers"]} == {400, 1000}
    assert stat.S_IMODE((home / "vault").stat().st_mode) == 0o700
    assert json.loads((home / "home.json").read_text())["layout_version"] == 1
    assert summary["datasets"][0]["ref"] == "synthetic/v1" and summary["datasets"][0]["approved"]
    assert set(summary["gate"]) == {"pinned_code_sha256", "baseline", "reference", "users_separated"}
    assert summary["gate"]["baseline"].endswith("baseline-classical.onnx")
    # the gate times its verdicts with the demo base config's model (configs/run-demo.yaml), kept in the vault
    assert summary["gate"]["reference"].endswith("reference-candidate.onnx")
    kept = list((home / "vault" / "reference").glob("*.onnx"))
    assert [p.read_bytes() for p in kept] == [Path(summary["gate"]["reference"]).read_bytes()]
    assert len(read_split(home / "datasets/synthetic/v1/train")) == 768


def test_rerun_reports_existing_home_without_rebuilding(
    demo_home: tuple[Path, dict[str, Any]], cli: Callable[..., Any]
) -> None:
    home, summary = demo_home
    before = (tier_path(home / "vault", "sealed") / "images.npy").stat().st_mtime_ns
    result = cli("init", "--profile", "demo", "--home", str(home), "--json")
    assert result.returncode == 0
    again = json.loads(result.stdout)
    assert again["existing"] is True and again["tiers"] == summary["tiers"]
    assert (tier_path(home / "vault", "sealed") / "images.npy").stat().st_mtime_ns == before


def test_secret_seeds_stay_in_the_vault(demo_home: tuple[Path, dict[str, Any]]) -> None:
    home, summary = demo_home
    seeds = [str(read_secret_seed(home / "vault", tier)) for tier in TIERS]
    assert len(set(seeds)) == len(TIERS)
    for path in home.rglob("*"):
        if (
            path.is_file()
            and "vault" not in path.relative_to(home).parts
            and path.suffix in (".json", ".jsonl")
        ):
            text = path.read_text()
            assert not any(seed in text for seed in seeds), path
    assert not any(seed in json.dumps(summary) for seed in seeds)


def test_public_seeds_do_not_reproduce_a_tier(demo_home: tuple[Path, dict[str, Any]]) -> None:
    home, _ = demo_home
    held = {m["sha256"] for tier in TIERS for m in read_split(tier_path(home / "vault", tier)).image_meta}
    for seed in (TRAIN_SEED, DEV_SEED, 0, 3, 42, 1234):
        drawn = generate(400, 64, seed)
        assert not held & {m["sha256"] for m in drawn.image_meta}


def test_no_held_back_image_has_a_near_neighbour_in_train_or_dev(
    demo_home: tuple[Path, dict[str, Any]],
) -> None:
    home, _ = demo_home
    open_images = np.concatenate(
        [read_split(home / f"datasets/synthetic/v1/{s}").images for s in ("train", "dev")]
    )
    for tier in TIERS:
        assert near_duplicates(read_split(tier_path(home / "vault", tier)).images, open_images) == []


def test_no_held_back_data_outside_the_vault(demo_home: tuple[Path, dict[str, Any]]) -> None:
    """No held-back image hash, array file or label file exists anywhere in the open folders."""
    home, summary = demo_home
    held_hashes = {
        m["sha256"] for tier in TIERS for m in read_split(tier_path(home / "vault", tier)).image_meta
    }
    held_files = {
        sha256_file(tier_path(home / "vault", tier) / name)
        for tier in TIERS
        for name in ("images.npy", "masks.npy", "defects.jsonl")
    }
    for path in home.rglob("*"):
        if not path.is_file() or "vault" in path.relative_to(home).parts:
            continue
        assert sha256_file(path) not in held_files, path
        if path.suffix in (".json", ".jsonl"):
            text = path.read_text()
            assert not any(h in text for h in held_hashes), path
    assert not any(h in json.dumps(summary) for h in held_hashes)
