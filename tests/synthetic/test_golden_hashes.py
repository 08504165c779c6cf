"""The generator's output is pinned byte for byte: a speed-up must not change a single array.

The hashes below were written by generator 1.1.0 before the split writer hashed files while
writing them; a seed's content hash is what dataset versions name their parents by, so the same
seed must give the same bytes whatever the writer, the engine's speed or the number of workers.

The image pixels (and so the void contrasts measured on them) also depend on the machine's
floating point: the compiled kernels use fused multiply-add where the CPU has it and numpy's
``exp`` has CPU-specific SIMD paths, so two CPU families draw the same masks and slightly
different images. Each family seen so far has its own pinned set below; on a given machine the
bytes must match one of them exactly, and every writer and worker count must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from synthetic import generate, generate_split
from synthetic.splits import content_hash, read_split

# The CPU family CI pinned first (generator 1.1.0).
PINNED_FIRST = {
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
# AMD EPYC (znver3: AVX2 and FMA, no AVX-512), seen 2026-12-04: same masks, other image bits.
PINNED_AVX2 = {
    (40, 32, 3): (
        "0d5f57720be85bd695f5b2c4166415fa372f031cd851e325b05f46bd2cacca3d",
        {
            "defects.jsonl": "b89cfeb6220c1731142649c32e71da42fa8f79316cea6c4a606561b157e8ef39",
            "images.jsonl": "8323ad7fe2db94ff09780fc34ad3a4a654f28025d4a08e4e6ebeff13323a9b3e",
            "images.npy": "dfbbf1b39f4118f18ef599b989be4f4629fa5542c7ad0288345e290f11f467fd",
            "masks.npy": "55e8e7300169c9552e8a103c3dadbd9d681b7c1e23db9217e0857d7786a20fff",
        },
    ),
    (600, 24, 5): (
        "43b11a85a732002f4cc69576f60348953953f5285f02e4b21a8f7d7c75cf785b",
        {
            "defects.jsonl": "c4a269e8caf105a7034bf3390c3b0b8b67ed85cea3f5b06f4f8b1b2cfc1b772d",
            "images.jsonl": "60919b8fab5515a91250275041e98a6472dfc651700163f38b9ae06091d31d03",
            "images.npy": "534a532f3d66b0c90b362a1ffd0118c0343310fbc466fdca57eced1563bf44cd",
            "masks.npy": "4950311636bbe54537265032438ac2a31564fba43d19646a7d2f059b672e7af6",
        },
    ),
}
PINNED = {key: [PINNED_FIRST[key], PINNED_AVX2[key]] for key in PINNED_FIRST}


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
    got = (manifest["content_hash"], manifest["files"])
    assert got in PINNED[(n, size, seed)], f"no pinned CPU family draws these bytes: {got}"
    assert all(pin[1]["masks.npy"] == manifest["files"]["masks.npy"] for pin in PINNED[(n, size, seed)])
    pinned_content = manifest["content_hash"]
    split = read_split(folder)  # the hashes recomputed from what was read back agree
    assert content_hash(split.images, split.masks, split.image_meta, split.defects) == pinned_content


def test_the_noise_table_is_the_standard_librarys_quantiles_entry_for_entry() -> None:
    from statistics import NormalDist

    from synthetic._kernels import NORMAL_TABLE_BITS, normal_table

    cells = 1 << NORMAL_TABLE_BITS
    inv_cdf = NormalDist().inv_cdf
    reference = [inv_cdf(min(max(k / cells, 0.5 / cells), 1.0 - 0.5 / cells)) for k in range(cells + 1)]
    assert normal_table().tolist() == np.array(reference, np.float32).tolist()
