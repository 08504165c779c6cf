"""The generator's output is pinned byte for byte: a speed-up must not change a single array.

The hashes below were written by generator 1.1.0 before the split writer hashed files while
writing them; a seed's content hash is what dataset versions name their parents by, so the same
seed must give the same bytes whatever the writer, the engine's speed or the number of workers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from synthetic import generate, generate_split
from synthetic.splits import content_hash, read_split

PINNED = {
    (40, 32, 3): (
        "85a956ef5250695bb04848a59215f5401fae81c1c26b12b96c6eb08477f582d1",
        {
            "defects.jsonl": "cac39cb007a3c7f2f8ba66e294772c49823e38527a63da4053ee47dc487a6934",
            "images.jsonl": "ee58e117d7b2365a7b63617843b2214dda3d86a0f2b52449c0777738bffac810",
            "images.npy": "728471690179181d65da34c6a8f8561f7299abd36fa56b90314e3c2d11a1bbac",
            "masks.npy": "55e8e7300169c9552e8a103c3dadbd9d681b7c1e23db9217e0857d7786a20fff",
        },
    ),
    (600, 24, 5): (  # above PARALLEL_MIN_IMAGES: forked workers, chunks returned out of order
        "1a65a5c2c36862e5031c669e37b8a8497757df4e2425d6cc984a6f7ac5078b3b",
        {
            "defects.jsonl": "1a717ebdbabcea0e6777e7e882eb5384fd4837accf27cfbf6058eab1c5f6d372",
            "images.jsonl": "00c96d94d2181d4973bac4e7767d19172de547bba1e32a1f81f918f1d481327b",
            "images.npy": "92544c964bcba637aca27e6cedb3047bb59fbf2a6f273a07f45a6e7150e67758",
            "masks.npy": "4950311636bbe54537265032438ac2a31564fba43d19646a7d2f059b672e7af6",
        },
    ),
}


@pytest.mark.parametrize(("n", "size", "seed"), sorted(PINNED))
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("in_place", [False, True], ids=["write", "in-place"])
def test_a_seed_writes_the_pinned_bytes(
    tmp_path: Path, n: int, size: int, seed: int, workers: int, in_place: bool
) -> None:
    folder = tmp_path / "split"
    if in_place:  # drawn straight into the files, as `data generate` does
        generate_split(folder, n, size, seed, workers=workers)
    else:
        generate(n, size, seed, workers=workers).write(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    pinned_content, pinned_files = PINNED[(n, size, seed)]
    assert manifest["files"] == pinned_files
    assert manifest["content_hash"] == pinned_content
    split = read_split(folder)  # the hashes recomputed from what was read back agree
    assert content_hash(split.images, split.masks, split.image_meta, split.defects) == pinned_content


def test_the_noise_table_is_the_standard_librarys_quantiles_entry_for_entry() -> None:
    from statistics import NormalDist

    from synthetic._kernels import NORMAL_TABLE_BITS, normal_table

    cells = 1 << NORMAL_TABLE_BITS
    inv_cdf = NormalDist().inv_cdf
    reference = [inv_cdf(min(max(k / cells, 0.5 / cells), 1.0 - 0.5 / cells)) for k in range(cells + 1)]
    assert normal_table().tolist() == np.array(reference, np.float32).tolist()
