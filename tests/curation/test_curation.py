"""Curation: planted duplicates, near duplicates and tiles; label-noise ranking; plans and versions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from analysis.curation.defects import label_issue_ranking
from analysis.curation.neardup import (
    all_embedding_pairs,
    all_pairs,
    candidate_pairs,
    embedding_pairs,
    fingerprint,
    near_duplicates,
)
from analysis.curation.tiles import find_overlaps, trace_sources
from synthetic import generate
from synthetic.versions import create_version

N_BASE = 120
N_EXACT, N_NEAR = 15, 15


@pytest.fixture(scope="module")
def planted() -> tuple[np.ndarray, set[tuple[int, int]]]:
    """Originals, then exact copies, then noisy copies shifted by up to 2 pixels; the planted pairs."""
    base = generate(N_BASE, 96, 11, engine="numpy").images
    rng = np.random.default_rng(0)
    exact = base[:N_EXACT].copy()
    src = np.arange(N_EXACT, N_EXACT + N_NEAR)
    near = np.stack(
        [
            np.clip(
                np.roll(base[k], tuple(rng.integers(-2, 3, 2)), axis=(0, 1))
                + rng.normal(0, 0.01, base[k].shape),
                0,
                1,
            )
            for k in src
        ]
    ).astype(np.float32)
    images = np.concatenate([base, exact, near])
    pairs = {(k, N_BASE + k) for k in range(N_EXACT)} | {
        (int(k), N_BASE + N_EXACT + n) for n, k in enumerate(src)
    }
    return images, pairs


def _precision_recall(found: set[tuple[int, int]], truth: set[tuple[int, int]]) -> tuple[float, float]:
    hit = len(found & truth)
    return hit / max(1, len(found)), hit / len(truth)


def test_planted_duplicates_found_at_documented_thresholds(
    planted: tuple[np.ndarray, set[tuple[int, int]]],
) -> None:
    images, truth = planted
    found = near_duplicates(fingerprint(images), images).as_set()
    precision, recall = _precision_recall(found, truth)
    assert precision >= 0.95 and recall >= 0.95, (precision, recall, sorted(found - truth))


def test_blocked_search_matches_all_pairs(planted: tuple[np.ndarray, set[tuple[int, int]]]) -> None:
    prints = fingerprint(images := planted[0])
    assert len(images) == len(prints)
    for bits in (24, 40, 56):
        assert candidate_pairs(prints, bits).as_set() == all_pairs(prints, bits).as_set()
    reference = all_embedding_pairs(prints).as_set()
    found = embedding_pairs(prints).as_set()
    assert reference and len(found & reference) / len(reference) >= 0.95


def test_overlapping_tiles_traced_to_their_source() -> None:
    big = generate(12, 160, 5, engine="numpy").images
    offsets = [(0, 0), (0, 48), (48, 20)]
    tiles = np.stack([big[k, y : y + 96, x : x + 96] for k in range(12) for y, x in offsets])
    others = generate(20, 96, 9, engine="numpy").images
    overlaps = find_overlaps(np.concatenate([tiles, others]))
    truth = {(3 * k + a, 3 * k + b) for k in range(12) for a in range(3) for b in range(a + 1, 3)}
    precision, recall = _precision_recall({(o.a, o.b) for o in overlaps}, truth)
    assert precision >= 0.95 and recall >= 0.95
    sources = trace_sources(overlaps)
    assert len(sources) == 12
    assert sources[0] == {0: (0, 0), 1: (0, 48), 2: (48, 20)}


def _inject(mask: np.ndarray, kind: str) -> np.ndarray:
    if kind == "dilate":
        return ndimage.binary_dilation(mask, iterations=2).astype(np.uint8)
    if kind == "erode":
        return ndimage.binary_erosion(mask, iterations=1).astype(np.uint8)
    if kind == "drop":
        return np.zeros_like(mask)
    return np.roll(mask, (3, 3), axis=(0, 1))


@pytest.mark.slow
def test_injected_label_noise_ranked_with_precision_at_k() -> None:
    data = generate(80, 64, 21, engine="numpy")
    masks = data.masks.copy()
    with_voids = [i for i in range(len(masks)) if masks[i].sum() >= 12]
    rng = np.random.default_rng(1)
    noisy = rng.choice(with_voids, size=12, replace=False)
    for n, i in enumerate(noisy):
        masks[i] = _inject(masks[i], ("dilate", "erode", "drop", "shift")[n % 4])
    # the "model": the clean labels, softened (what a well-trained model would predict)
    probs = np.clip(ndimage.gaussian_filter(data.masks.astype(np.float32), (0, 1, 1)), 0.02, 0.98)
    order = label_issue_ranking(masks, probs)
    k = len(noisy)
    precision_at_k = len(set(order[:k].tolist()) & set(noisy.tolist())) / k
    assert precision_at_k >= 0.75, precision_at_k


def _home_with_version(tmp_home: Path, n: int = 60) -> Path:
    tmp_home.mkdir(parents=True)
    (tmp_home / "home.json").write_text(json.dumps({"profile": "demo"}))
    train = generate(n, 64, 3, engine="numpy")
    train.images[5] = train.images[2]  # a planted exact duplicate
    train.image_meta[5] = {**train.image_meta[5], "sha256": train.image_meta[2]["sha256"]}
    staging = tmp_home / "staging"
    train.write(staging / "train")
    generate(20, 64, 4, engine="numpy").write(staging / "dev")
    create_version(tmp_home, "syn", {"train": staging / "train", "dev": staging / "dev"}, approve_it=True)
    return tmp_home


@pytest.mark.slow
def test_curate_images_apply_end_to_end(tmp_home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    home = _home_with_version(tmp_home)
    run = cli("curate", "images", "--data", "syn/v1", "--home", str(home), "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["n_exact_groups"] == 1 and report["plan_items"] >= 1
    assert set(report) == {
        "dataset",
        "content_hash",
        "n_train",
        "n_dev",
        "thresholds",
        "exact_duplicates",
        "n_exact_groups",
        "near_duplicates_train",
        "n_near_duplicates_train",
        "cross_split",
        "n_cross_split",
        "tiles",
        "quality",
        "coverage",
        "sensitivity",
        "hard_images",
        "plan_items",
        "plan",
    }  # the --json shape is a contract
    assert all(set(ref) == {"split", "id"} for ref in report["exact_duplicates"][0])
    assert set(report["tiles"]) == {"overlaps", "n_overlaps", "sources"} and report["hard_images"] is None
    assert {type(row["threshold"]) for row in report["sensitivity"] if row["signal"] == "phash_bits"} == {int}
    plan = Path(report["plan"])
    applied = cli("curate", "apply", str(plan), "--home", str(home), "--json")
    assert applied.returncode == 0, applied.stderr
    out = json.loads(applied.stdout)
    assert out["dataset"] == "syn/v2" and out["approved"] is True
    meta = json.loads((home / "datasets/syn/v2/version.json").read_text())
    v1 = json.loads((home / "datasets/syn/v1/version.json").read_text())
    assert meta["parent"] == v1["content_hash"]
    assert (home / "datasets/syn/v2/dev/images.npy").stat().st_ino == (
        home / "datasets/syn/v1/dev/images.npy"
    ).stat().st_ino
    again = cli("curate", "apply", str(plan), "--home", str(home))
    assert again.returncode != 0 and "already applied" in again.stderr
    assert not (home / "datasets/syn/v3").exists()
    data = json.loads(plan.read_text())
    data["items"][0]["image_id"] = 10_000
    bad = plan.with_name("bad.json")
    bad.write_text(json.dumps(data))
    missing = cli("curate", "apply", str(bad), "--home", str(home))
    assert missing.returncode != 0 and "do not exist" in missing.stderr
    data["content_hash"] = "0" * 64
    bad.write_text(json.dumps(data))
    other = cli("curate", "apply", str(bad), "--home", str(home))
    assert other.returncode != 0 and "was made for" in other.stderr
    (home / "vault" / "confirm-a").mkdir(parents=True)
    vault = cli("curate", "images", "--data", str(home / "vault" / "confirm-a"), "--home", str(home))
    assert vault.returncode != 0 and "vault" in vault.stderr
