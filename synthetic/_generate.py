"""The void generator: ``generate(n, size, seed, params)`` -> images, exact masks, metadata.

Image ``i`` of a set draws everything from its own stream ``SeedSequence(seed, spawn_key=(i,))``,
so a set is identical whatever the number of worker processes, and any image can be re-drawn
alone. Workers are forked processes writing into shared memory; metadata comes back by pipe.
"""

from __future__ import annotations

import math
import mmap
import multiprocessing as mp
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from segfactory.errors import DataError, UsageError
from segfactory.files import staged_dir
from synthetic import _physics
from synthetic._parts import procedural_part, silhouette_part
from synthetic._physics import Acquisition
from synthetic._voids import VoidPlacer, attenuation
from synthetic.idx import load_silhouettes
from synthetic.params import MAX_IMAGE_SIZE, MAX_N, GenParams
from synthetic.splits import (
    DefectRow,
    ImageMeta,
    SplitHashes,
    SplitManifest,
    create_arrays,
    finish_split,
    image_sha256,
    write_split,
)

GENERATOR_VERSION = (
    "1.1.0"  # 1.1: table-based fast noise, real-arithmetic polygon contours (new arrays per seed)
)
MIN_IMAGE_SIZE = 16  # pixels per side; smaller images cannot hold a part and a void
PARALLEL_MIN_IMAGES = 512  # below this many images one process is faster than forking
CHUNK_IMAGES = 256  # images per task handed to a worker

Progress = Callable[[int], None]  # called with the number of images just finished
# called in image order with (start, stop, image rows, defect rows) as the drawn prefix grows
Ready = Callable[[int, int, list[ImageMeta], list[DefectRow]], None]
Engine = Literal["fast", "numpy"]
ENGINES = ("fast", "numpy")  # fast: numba void placement + float32 exposure; numpy: the reference


@dataclass
class GeneratedSet:
    """A generated set in memory; ``write`` turns it into a split folder."""

    images: np.ndarray  # (N, S, S) float32 in [0, 1]
    masks: np.ndarray  # (N, S, S) uint8 in {0, 1}
    image_meta: list[ImageMeta]
    defects: list[DefectRow]
    params: GenParams
    seed_label: str  # what the manifest says about the seed ("public:<k>" or "secret")
    extra: SplitManifest = field(default_factory=SplitManifest)  # more manifest keys

    def manifest(self, parent: str | None = None) -> SplitManifest:
        return {
            "generator": "segfactory.synthetic",
            "generator_version": GENERATOR_VERSION,
            "params": self.params.model_dump(mode="json"),
            "seed": self.seed_label,
            "parent": parent,
            "kind": "synthetic",
            **self.extra,
        }

    def write(self, path: Path | str, parent: str | None = None) -> Path:
        return write_split(
            path, self.images, self.masks, self.image_meta, self.defects, self.manifest(parent)
        )


def _check_args(n: int, size: int) -> None:
    if n <= 0 or n > MAX_N:
        raise UsageError(f"n must be between 1 and {MAX_N}; got {n}")
    if size < MIN_IMAGE_SIZE or size > MAX_IMAGE_SIZE:
        raise UsageError(f"size must be between {MIN_IMAGE_SIZE} and {MAX_IMAGE_SIZE} pixels; got {size}")


def _silhouettes(params: GenParams) -> np.ndarray | None:
    if params.part_source != "fashion-mnist":
        return None

    return load_silhouettes(Path(str(params.idx_path)))


def render_one(
    index: int, seed: int, size: int, params: GenParams, silhouettes: np.ndarray | None, engine: str = "fast"
) -> tuple[np.ndarray, np.ndarray, ImageMeta, list[DefectRow]]:
    """Image ``index`` of the set with this seed: (image, mask, image row, defect rows)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    part = (
        procedural_part(size, params, rng, engine)
        if silhouettes is None
        else silhouette_part(silhouettes, size, params, rng)
    )
    placer = VoidPlacer(part.thickness, params, rng, engine)
    if rng.random() < params.void_prob:
        for _ in range(int(rng.integers(params.count_min, params.count_max + 1))):
            placer.add_random_void()
    acq = _physics.acquisition(params, rng)
    image = _physics.expose(part.thickness - placer.path, acq, rng, engine)
    for row, wall_mm in zip(placer.rows, placer.row_walls, strict=True):
        wall = math.exp(-attenuation(wall_mm, acq["mu"], acq["beam_hardening"])) + acq["scatter"]
        row["noise"] = round(_physics.noise_sigma(wall, acq), 6)
        row["image_id"] = index
    inside = np.count_nonzero(part.thickness)  # thickness >= 0: the pixels inside the part
    meta: ImageMeta = {
        "id": index,
        "sha256": image_sha256(image),
        **part.meta,
        **_recorded(acq),
        "thickness": round(float(part.thickness.sum()) / inside if inside else 0.0, 4),
        "n_defects": len(placer.rows),
    }
    return image, placer.mask, meta, placer.rows


def _recorded(acq: Acquisition) -> Acquisition:
    """The acquisition as an image's row records it: its numbers rounded to 6 decimals."""
    return {
        "background": acq["background"],
        "dose": round(acq["dose"], 6),
        "blur": round(acq["blur"], 6),
        "gain": round(acq["gain"], 6),
        "offset": round(acq["offset"], 6),
        "scatter": round(acq["scatter"], 6),
        "read_noise": round(acq["read_noise"], 6),
        "mu": round(acq["mu"], 6),
        "beam_hardening": round(acq["beam_hardening"], 6),
    }


def _render_range(
    start: int,
    stop: int,
    seed: int,
    size: int,
    params: GenParams,
    engine: str,
    images: np.ndarray,
    masks: np.ndarray,
) -> tuple[list[ImageMeta], list[DefectRow]]:
    silhouettes = _silhouettes(params)
    metas: list[ImageMeta] = []
    defects: list[DefectRow] = []
    for i in range(start, stop):
        images[i], masks[i], meta, rows = render_one(i, seed, size, params, silhouettes, engine)
        metas.append(meta)
        defects.extend(rows)
    return metas, defects


@dataclass(frozen=True)
class _Work:
    """What every worker draws with: the set's seed, size, parameters, engine and shared arrays."""

    seed: int
    size: int
    params: GenParams
    engine: str
    images: np.ndarray
    masks: np.ndarray


_SHARED: list[_Work] = []  # set in the parent before forking; read by the workers


def _worker(task: tuple[int, int]) -> tuple[int, list[ImageMeta], list[DefectRow]]:
    s = _SHARED[0]
    metas, defects = _render_range(task[0], task[1], s.seed, s.size, s.params, s.engine, s.images, s.masks)
    return task[0], metas, defects


def _shared_array(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buffer = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_SHARED)
    return np.frombuffer(buffer, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _generate_parallel(
    arrays: tuple[np.ndarray, np.ndarray],
    seed: int,
    params: GenParams,
    engine: str,
    workers: int,
    progress: Progress | None,
    ready: Ready | None,
) -> tuple[list[ImageMeta], list[DefectRow]]:
    images, masks = arrays
    n, size = images.shape[0], images.shape[1]
    _SHARED[:] = [_Work(seed, size, params, engine, images, masks)]
    tasks = [(a, min(a + CHUNK_IMAGES, n)) for a in range(0, n, CHUNK_IMAGES)]
    results: dict[int, tuple[list[ImageMeta], list[DefectRow]]] = {}
    frontier = 0  # images [0, frontier) are drawn and handed to ``ready``
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            for start, metas, defects in pool.imap_unordered(_worker, tasks):
                results[start] = (metas, defects)
                if progress:
                    progress(len(metas))
                while ready is not None and frontier in results:  # while the workers go on
                    rows, voids = results[frontier]
                    ready(frontier, frontier + len(rows), rows, voids)
                    frontier += len(rows)
    finally:
        _SHARED.clear()
    metas_all = [m for start in sorted(results) for m in results[start][0]]
    defects_all = [d for start in sorted(results) for d in results[start][1]]
    return metas_all, defects_all


def generate(
    n: int,
    size: int,
    seed: int,
    params: GenParams | None = None,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    seed_label: str | None = None,
    engine: Engine = "fast",
    into: Path | None = None,
    ready: Ready | None = None,
) -> GeneratedSet:
    """Draw ``n`` images of ``size`` x ``size`` pixels from ``seed``.

    ``workers`` defaults to every core (forked processes); results do not depend on it. From a
    process that runs threads (a server), pass ``workers=1``: forking it can deadlock. ``seed_label`` is what
    the manifest records about the seed (the tiers pass ``"secret"``; default ``public:<seed>``).
    ``engine`` picks the code: ``fast`` (default) or ``numpy`` (the plain reference); they
    draw the same parts, voids and masks, and noise of the same distribution but not the same
    values. Raises UsageError on bad
    arguments, DataError on an unreadable part source. ``into``: a folder being staged as a split,
    where the arrays are drawn straight into ``images.npy`` and ``masks.npy`` (``generate_split``);
    ``ready`` is called in image order as the drawn images grow (it hashes them meanwhile).
    """
    _check_args(n, size)
    if engine not in ENGINES:
        raise UsageError(f"generator engine {engine!r} is not known; known: {', '.join(ENGINES)}")
    params = params or GenParams()
    _silhouettes(params)  # a missing or corrupt IDX file fails here, before any fork (and is cached)
    workers = workers or os.cpu_count() or 1
    if engine == "fast":
        from synthetic._kernels import warm_up  # deferred: numba, for the fast engine only

        warm_up()  # load the cached kernels once, before any fork
    images: np.ndarray
    masks: np.ndarray
    if into is not None:
        images, masks = create_arrays(into, n, (size, size))
    else:  # shared memory, which forked workers write into; cheaper to fault in than np.empty's pages
        images, masks = _shared_array((n, size, size), np.float32), _shared_array((n, size, size), np.uint8)
    if workers > 1 and n >= PARALLEL_MIN_IMAGES:
        metas, defects = _generate_parallel((images, masks), seed, params, engine, workers, progress, ready)
    else:
        metas, defects = [], []
        for start in range(0, n, CHUNK_IMAGES):
            stop = min(start + CHUNK_IMAGES, n)
            m, d = _render_range(start, stop, seed, size, params, engine, images, masks)
            metas.extend(m)
            defects.extend(d)
            if progress:
                progress(stop - start)
            if ready:
                ready(start, stop, m, d)
    label = seed_label if seed_label is not None else f"public:{seed}"
    return GeneratedSet(images, masks, metas, defects, params, label, {"engine": engine})


def generate_split(
    path: Path | str, n: int, size: int, seed: int, params: GenParams | None = None, **options: Any
) -> GeneratedSet:
    """``generate`` written straight into a new split folder at ``path`` (staged, then renamed).

    The same bytes as ``generate(...).write(path)``; the workers draw into the files' own pages,
    so the arrays are never copied, and this process hashes what is drawn while the workers go
    on. ``options`` are ``generate``'s keywords; the returned set's arrays are mapped from the
    written files."""
    target = Path(path)
    if target.exists():
        raise DataError(f"{target} already exists; split folders are immutable, choose a new --out")
    with staged_dir(target, mode=0o755) as tmp:  # open splits are readable (the vault guards tiers)
        hashes: list[SplitHashes] = []

        def ready(start: int, stop: int, rows: list[ImageMeta], voids: list[DefectRow]) -> None:
            if not hashes:  # the arrays exist once generate has made them
                hashes.append(SplitHashes(tmp))
            hashes[0].add(start, stop, rows, voids)

        result = generate(n, size, seed, params, into=tmp, ready=ready, **options)
        meta = result.image_meta
        finish_split(tmp, result.images, result.masks, meta, result.defects, result.manifest(), hashes[0])
    return result
