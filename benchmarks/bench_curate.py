"""Near-duplicate search over 100,000 images at 96x96, streamed from a memory-mapped array.

Generates the images once into a temporary ``.npy`` memmap (smooth random content: a 12x12
random field upsampled x8 plus pixel noise) with planted near duplicates (a copy of another
image with fresh noise; half of them also shifted by one pixel). The 5,000-image recall subset
holds every planted pair plus random others, so the reference has pairs to find. The search itself
runs in a child process so that its peak anonymous memory is measured alone: a sampler thread
reads ``RssAnon`` from ``/proc/self/status`` every 10 ms (file-backed pages of the memmap are not
anonymous).

Prints: machine load, search time, peak anonymous memory, recall of the blocked search against
an exact all-pairs search on a 5,000-image subset, recall of the planted duplicates, and the
ratio of the (extrapolated, O(N^2)) all-pairs time to the blocked time.

    .venv/bin/python benchmarks/bench_curate.py [--n 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZE = 96
N_PLANTED = 1000  # planted near-duplicate pairs
SUBSET = 5000  # images in the all-pairs reference check
GEN_CHUNK = 4096


def _read_status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def generate(path: Path, n: int, seed: int = 0) -> np.ndarray:
    """Write ``n`` images to ``path`` chunk by chunk; returns the planted pairs (N_PLANTED, 2)."""
    rng = np.random.default_rng(seed)
    low = rng.random((n, 12, 12), dtype=np.float32) * 0.6 + 0.2
    planted = rng.choice(n, size=(min(N_PLANTED, n // 4), 2), replace=False)
    low[planted[:, 1]] = low[planted[:, 0]]
    shifted = set(planted[::2, 1].tolist())  # half the copies shifted by a pixel, half only re-noised
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, SIZE, SIZE))
    for start in range(0, n, GEN_CHUNK):
        stop = min(start + GEN_CHUNK, n)
        block = np.repeat(np.repeat(low[start:stop], 8, axis=1), 8, axis=2)
        block += rng.normal(0, 0.02, block.shape).astype(np.float32)
        for k in range(start, stop):
            if k in shifted:
                block[k - start] = np.roll(block[k - start], (1, 1), axis=(0, 1))
        out[start:stop] = np.clip(block, 0, 1)
    out.flush()
    del out
    return np.sort(planted, axis=1)


def search(path: Path, planted_path: Path) -> dict[str, float]:
    """The measured part (runs in the child): fingerprint by streaming, then the blocked search."""
    from analysis.curation.neardup import (
        all_embedding_pairs,
        all_pairs,
        candidate_pairs,
        embedding_pairs,
        fingerprint,
        hash_duplicates,
        union,
    )

    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _read_status("RssAnon"))
            time.sleep(0.01)

    base_anon = _read_status("RssAnon")
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    images = np.load(path, mmap_mode="r")
    t0 = time.perf_counter()
    prints = fingerprint(images)
    t_print = time.perf_counter() - t0
    t1 = time.perf_counter()
    hash_found = hash_duplicates(prints, images)
    t_hash = time.perf_counter() - t1
    pairs = union(hash_found, embedding_pairs(prints))
    t_total = time.perf_counter() - t0
    stop.set()
    sampler.join()
    planted_pairs = np.load(planted_path)
    planted = {tuple(p) for p in planted_pairs.tolist()}
    found = pairs.as_set()
    rng = np.random.default_rng(1)
    members = np.unique(planted_pairs)
    fill = rng.choice(np.setdiff1d(np.arange(images.shape[0]), members), SUBSET - len(members), replace=False)
    sub = fingerprint(images[np.sort(np.concatenate([members, fill]))])  # every planted pair + random others
    t1 = time.perf_counter()
    ref_hash, ref_emb = all_pairs(sub).as_set(), all_embedding_pairs(sub).as_set()
    t_ref = time.perf_counter() - t1
    got_hash, got_emb = candidate_pairs(sub).as_set(), embedding_pairs(sub).as_set()
    reference = ref_hash | ref_emb
    recall = len(reference & (got_hash | got_emb)) / len(reference) if reference else 1.0
    return {
        "n": int(images.shape[0]),
        "seconds": t_total,
        "fingerprint_seconds": t_print,
        "hash_seconds": t_hash,
        "peak_anon_bytes": float(peak[0]),
        "anon_at_start_bytes": float(base_anon),
        "vm_hwm_bytes": float(_read_status("VmHWM")),
        "pairs": float(len(found)),
        "planted_recall": len(planted & found) / len(planted),
        "subset_pairs": float(len(reference)),
        "subset_recall": recall,
        "subset_hash_pairs": float(len(ref_hash)),
        "subset_embedding_pairs": float(len(ref_emb)),
        "subset_hash_recall": len(ref_hash & got_hash) / len(ref_hash) if ref_hash else 1.0,
        "subset_embedding_recall": len(ref_emb & got_emb) / len(ref_emb) if ref_emb else 1.0,
        "allpairs_subset_seconds": t_ref,
        "allpairs_extrapolated_seconds": t_ref * (images.shape[0] / SUBSET) ** 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, default=None, help="reuse/keep the generated images here")
    parser.add_argument("--child", nargs=2, type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.stdout.write(json.dumps(search(*args.child)) + "\n")
        return
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_curate-"))
    folder.mkdir(parents=True, exist_ok=True)
    images, planted = folder / "images.npy", folder / "planted.npy"
    if not images.exists():
        t0 = time.perf_counter()
        np.save(planted, generate(images, args.n))
        sys.stdout.write(f"generated {args.n} images at {SIZE}x{SIZE} in {time.perf_counter() - t0:.1f} s\n")
    load = os.getloadavg()
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(images), str(planted)],
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(done.stdout.strip().splitlines()[-1])
    mib = 1024**2
    sys.stdout.write(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
        f"near-duplicate search over {r['n']} images: {r['seconds']:.1f} s "
        f"(fingerprints {r['fingerprint_seconds']:.1f} s, pHash search {r['hash_seconds']:.1f} s, "
        f"embedding LSH {r['seconds'] - r['fingerprint_seconds'] - r['hash_seconds']:.1f} s), "
        f"{int(r['pairs'])} pairs found\n"
        f"peak anonymous memory {r['peak_anon_bytes'] / mib:.0f} MiB "
        f"(at start {r['anon_at_start_bytes'] / mib:.0f} MiB; "
        f"peak RSS incl. mapped file {r['vm_hwm_bytes'] / mib:.0f} MiB)\n"
        f"recall vs exact all-pairs on a {SUBSET}-image subset: {r['subset_recall']:.4f} "
        f"({int(r['subset_pairs'])} reference pairs; pHash search {r['subset_hash_recall']:.4f} of "
        f"{int(r['subset_hash_pairs'])}, embedding LSH {r['subset_embedding_recall']:.4f} of "
        f"{int(r['subset_embedding_pairs'])}); planted-pair recall {r['planted_recall']:.4f}\n"
        f"ratio all-pairs (extrapolated from {r['allpairs_subset_seconds']:.2f} s on {SUBSET}) / blocked: "
        f"{r['allpairs_extrapolated_seconds'] / r['seconds']:.1f}x\n"
    )
    if args.keep is None:
        for path in (images, planted):
            path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
