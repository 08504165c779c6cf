"""Split folders: the one on-disk format for every set of images in segfactory.

A split folder holds

- ``images.npy``   float32 (N, H, W), the detector's normalised reading in [0, 1];
- ``masks.npy``    uint8 (N, H, W), 1 where a void is, 0 elsewhere (all zero when unlabelled);
- ``images.jsonl`` one object per image: ``id``, ``sha256`` (of the image row's bytes) and the
  acquisition parameters;
- ``defects.jsonl`` one object per void: ``image_id``, ``area``, ``diameter``, ``contrast``,
  ``thickness``, ``noise``, ``shape``, ``bbox`` ``[y0, x0, y1, x1]`` (exclusive ends), ``edge``;
- ``manifest.json`` generator version and parameters, counts, file hashes, parent.

Folders are written to a temporary sibling and renamed into place, so a reader never sees a
half-written split, and an existing split is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Required, TypedDict, TypeGuard, TypeVar

import numpy as np

from segfactory.errors import DataError
from segfactory.files import staged_dir

SPLIT_FILES = ("images.npy", "masks.npy", "images.jsonl", "defects.jsonl", "manifest.json")
MANIFEST_VERSION = 1


def image_sha256(image: np.ndarray) -> str:
    """The per-image hash recorded in ``images.jsonl``: sha256 of the float32 row's bytes."""
    return hashlib.sha256(np.ascontiguousarray(image, dtype=np.float32).data).hexdigest()  # .data: no copy


class ImageMeta(TypedDict, total=False):
    """One row of ``images.jsonl``. Every writer sets ``id`` and ``sha256``; the rest depends on
    where the image came from (the generator, an import, a top-up, a curation or labelling round)."""

    id: Required[int | str]  # the image's position when written by segfactory; a string in toy sets
    sha256: Required[str]  # of the float32 image row's bytes (``image_sha256``)
    # the generator's part (synthetic._parts.PartMeta)
    part: str  # superellipse, polygon, fashion-mnist (or toy)
    thickness_nominal: float  # mm
    ribs: int
    cores: int
    # the generator's acquisition (synthetic._physics.Acquisition)
    background: str
    dose: float
    blur: float
    gain: float
    offset: float
    scatter: float
    read_noise: float
    mu: float
    beam_hardening: float
    thickness: float  # mean wall thickness inside the part, mm
    n_defects: int  # voids drawn in the image
    # an import: the file stem and its bit depths
    source: str
    bit_depth: int
    container_bits: int
    augmented_from: int  # the top-up's augmentation arm: the base image it was re-drawn from
    source_id: int | str  # the image's id in the split it was taken from
    labelled_by: str


class DefectRow(TypedDict, total=False):
    """One row of ``defects.jsonl``: one void, as the generator or an import records it."""

    image_id: int | str  # the ``id`` of its image
    area: int  # pixels
    diameter: float  # equal-area diameter, pixels
    contrast: float | None  # Michelson contrast; None for an imported void with no ring around it
    depth: float  # generated voids: depth along the beam, mm
    thickness: float | None  # local wall thickness, mm; None for imported voids
    noise: float | None  # noise std of the normalised reading at the void's wall; None when imported
    shape: str  # pore, shrinkage, cluster (unknown when imported)
    bbox: list[int]  # [y0, x0, y1, x1], exclusive ends
    edge: bool  # the bbox touches the image border


class SplitManifest(TypedDict, total=False):
    """``manifest.json``: what the writer supplied (generator, parameters, parent, provenance) and
    what ``write_split`` adds (``manifest_version``, counts, file hashes, content hash)."""

    generator: str | None  # segfactory.synthetic, segfactory.topup, ...; None for an import
    generator_version: str
    params: dict[str, object]  # GenParams as JSON (``GenParams.model_dump(mode="json")``)
    seed: str  # "public:<k>" or "secret"
    engine: str
    parent: str | None  # the parent split's content hash
    kind: str  # synthetic, imported, real, unlabelled, ...
    source: str  # an import: the folder it was read from
    intensity_mapping: dict[str, object]  # synthetic.mapping.IntensityMapping as JSON
    import_warnings: list[str]
    intensity: dict[str, object]  # synthetic.intensity.IntensityStats as JSON
    stand_in: bool
    stand_in_note: str
    real_part: str  # a real import's part: real-dev or holdout
    tier: str  # a vault tier's name and version (synthetic.tiers)
    version: str
    appended: int  # images added after the base's (synthetic.extend.append_images)
    base_images: int
    topup: dict[str, str | int]  # a top-up dose: arm, n, slice, base
    manifest_version: int
    count: int
    shape: list[int]  # [H, W]
    n_defects: int
    files: dict[str, str]  # file name -> sha256
    content_hash: str


_Row = TypeVar("_Row", bound=Mapping[str, object])


@dataclass
class Split:
    """An in-memory (or memory-mapped) split folder."""

    path: Path | None
    images: np.ndarray  # (N, H, W) float32 in [0, 1]
    masks: np.ndarray  # (N, H, W) uint8 in {0, 1}
    image_meta: list[ImageMeta]
    # DefectRow's keys; typed loosely because callers in other packages re-key and sort the rows by
    # values they take as untyped (console/_labels.py, agents/labelling/_finetune.py)
    defects: list[dict[str, Any]]
    manifest: SplitManifest

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def content_hash(self) -> str:
        """A hash over the split's array and metadata hashes (what a version names its parent by)."""
        return str(self.manifest.get("content_hash", ""))


def _read_jsonl(path: Path) -> list[_Row]:
    """The rows of a JSON-lines file, of the row type the caller reads them as."""
    rows: list[_Row] = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{path}:{line_no}: not valid JSON ({exc.msg}); the split is corrupt"
                ) from None
    return rows


def read_split(path: Path | str, *, mmap: bool = False) -> Split:
    """Load a split folder. With ``mmap`` the arrays are memory-mapped read-only."""
    folder = Path(path)
    missing = [name for name in SPLIT_FILES if not (folder / name).is_file()]
    if missing:
        raise DataError(f"{folder} is not a split folder: missing {', '.join(missing)}")
    try:
        images = np.load(folder / "images.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
        masks = np.load(folder / "masks.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as exc:
        raise DataError(f"{folder}: cannot read arrays ({exc}); the split is corrupt") from None
    manifest = json.loads((folder / "manifest.json").read_text())
    split = Split(
        folder,
        images,
        masks,
        _read_jsonl(folder / "images.jsonl"),
        _read_jsonl(folder / "defects.jsonl"),
        manifest,
    )
    validate_shapes(split)
    return split


def appended_images(path: Path | str) -> tuple[int, int]:
    """(images the split adds after its parent's, images in all) from its manifest.

    A split built as a parent's images plus new ones (a targeted top-up, approved data) records
    ``appended``; top-ups built before that field record their dose as ``topup.n``. Training keeps
    the first ``max_train_images`` images, so a cap below the split's size cuts exactly these."""
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    topup = manifest.get("topup") if isinstance(manifest.get("topup"), dict) else {}
    return int(manifest.get("appended", topup.get("n", 0)) or 0), int(manifest.get("count", 0))


def validate_shapes(split: Split) -> None:
    """Raise DataError unless arrays and metadata agree in shape, dtype and count."""
    _validate_shapes(split.images, split.masks, len(split.image_meta))


def _validate_shapes(images: np.ndarray, masks: np.ndarray, n_meta: int) -> None:
    if images.ndim != 3 or images.dtype != np.float32:
        raise DataError(f"images must be float32 (N, H, W); got {images.dtype} {images.shape}")
    if masks.shape != images.shape or masks.dtype != np.uint8:
        raise DataError(
            f"masks must be uint8 with the images' shape {images.shape}; got {masks.dtype} {masks.shape}"
        )
    if n_meta != images.shape[0]:
        raise DataError(f"images.jsonl has {n_meta} rows for {images.shape[0]} images")


def _jsonl_lines(rows: Iterable[Mapping[str, object]]) -> list[bytes]:
    """Each row as the bytes it is written and hashed as (sorted keys, no newline)."""
    return [json.dumps(row, sort_keys=True).encode() for row in rows]


def content_hash(
    images: np.ndarray,
    masks: np.ndarray,
    image_meta: Sequence[Mapping[str, object]],
    defects: Sequence[Mapping[str, object]],
) -> str:
    """One hash for the whole split's content, independent of file layout (rows are hashed as
    written, so any JSON objects will do: a split's rows or ones built from them)."""
    return _content_hash(images, masks, _jsonl_lines(image_meta), _jsonl_lines(defects))


def _content_hash(images: np.ndarray, masks: np.ndarray, *lines: list[bytes]) -> str:
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(images, dtype=np.float32).data)  # .data: no 400 MB copy
    digest.update(np.ascontiguousarray(masks, dtype=np.uint8).data)
    for rows in lines:
        digest.update(b"".join(rows))  # one update over the concatenation: the same digest
    return digest.hexdigest()


class _HashingWriter:
    """A binary file that hashes what is written to it: the file's sha256 without reading it back."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def write(self, data: bytes | memoryview) -> int:
        self.digest.update(data)
        return self.handle.write(data)


def _write_npy(path: Path, array: np.ndarray) -> str:
    """``np.save``'s bytes exactly (header, then the C-order data), returning their sha256."""
    with open(path, "wb") as handle:
        writer = _HashingWriter(handle)
        np.lib.format.write_array_header_1_0(writer, np.lib.format.header_data_from_array_1_0(array))
        writer.write(array.data)  # contiguous: written and hashed without a copy
        handle.flush()
        os.fsync(handle.fileno())
    return writer.digest.hexdigest()


def _sync_npy(array: np.memmap) -> str:
    """Flush an array written in place (``create_arrays``) to disk and return its file's sha256."""
    array.flush()
    with open(str(array.filename), "rb") as handle:
        digest = hashlib.sha256(handle.read(array.offset))  # the header np.save would write
        os.fsync(handle.fileno())
    digest.update(array.data)  # the data, from the pages already mapped
    return digest.hexdigest()


def _flush_and_sync(array: np.memmap) -> None:
    """Flush an array written in place to disk (its hash was taken while it was drawn)."""
    array.flush()
    with open(str(array.filename), "rb") as handle:
        os.fsync(handle.fileno())


def _write_lines(path: Path, lines: list[bytes]) -> str:
    data = b"".join(line + b"\n" for line in lines)
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return hashlib.sha256(data).hexdigest()


def create_arrays(folder: Path, n: int, shape: tuple[int, int]) -> tuple[np.memmap, np.memmap]:
    """``images.npy`` and ``masks.npy`` of a split being written into ``folder``, mapped so that
    the generator draws straight into the files' pages (np.save's format, byte for byte).

    A split written this way is finished by ``finish_split``; copying 460 MB of arrays into new
    page-cache pages cost more than drawing them (docs/benchmarks.md, synthetic generator)."""
    images = np.lib.format.open_memmap(folder / "images.npy", mode="w+", dtype=np.float32, shape=(n, *shape))
    masks = np.lib.format.open_memmap(folder / "masks.npy", mode="w+", dtype=np.uint8, shape=(n, *shape))
    return images, masks


class SplitHashes:
    """The arrays' hashes and the metadata's lines, taken in image order while a split is still
    being drawn in place (``create_arrays``), so that ``finish_split`` has only the rest to do."""

    def __init__(self, folder: Path) -> None:
        self.images = np.load(folder / "images.npy", mmap_mode="r")  # the workers' pages, read-only
        self.masks = np.load(folder / "masks.npy", mmap_mode="r")
        self.files = {name: _npy_header_hash(folder / name) for name in ("images.npy", "masks.npy")}
        self.content = hashlib.sha256()  # the images first: see content_hash
        self.meta_lines: list[bytes] = []
        self.defect_lines: list[bytes] = []
        self.done = 0

    def add(
        self,
        start: int,
        stop: int,
        image_meta: Sequence[Mapping[str, object]],
        defects: Sequence[Mapping[str, object]],
    ) -> None:
        if start != self.done:
            raise ValueError(f"images {start}-{stop} handed over out of order (expected {self.done})")
        images = self.images[start:stop].data
        self.files["images.npy"].update(images)
        self.content.update(images)
        self.files["masks.npy"].update(self.masks[start:stop].data)
        self.meta_lines += _jsonl_lines(image_meta)
        self.defect_lines += _jsonl_lines(defects)
        self.done = stop


def _npy_header_hash(path: Path) -> Any:
    """A sha256 fed with the header np.save writes before a file's data (``open_memmap`` wrote it)."""
    offset = np.load(path, mmap_mode="r").offset
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read(offset))


def write_split(
    path: Path | str,
    images: np.ndarray,
    masks: np.ndarray,
    image_meta: Sequence[Mapping[str, object]],
    defects: Sequence[Mapping[str, object]],
    manifest: Mapping[str, object],
) -> Path:
    """Write a split folder atomically (temporary sibling, then rename) and return its path.

    Refuses to replace an existing folder. ``manifest`` gets counts, file hashes and the
    content hash added; the caller supplies generator version, parameters and parent.
    """
    target = Path(path)
    if target.exists():
        raise DataError(f"{target} already exists; split folders are immutable, choose a new --out")
    _validate_shapes(images, masks, len(image_meta))
    # open splits are readable (0755; the vault folder guards the tiers)
    with staged_dir(target, mode=0o755) as tmp:
        finish_split(tmp, images, masks, image_meta, defects, manifest)
    return target


def finish_split(
    folder: Path,
    images: np.ndarray,
    masks: np.ndarray,
    image_meta: Sequence[Mapping[str, object]],
    defects: Sequence[Mapping[str, object]],
    manifest: Mapping[str, object],
    hashes: SplitHashes | None = None,
) -> None:
    """Write a split's files into ``folder`` (a staged folder): the arrays, unless ``create_arrays``
    put them there already, the metadata and the manifest with its hashes, each synced to disk.
    ``hashes``: what was hashed of the arrays in place while they were drawn (all of them); then
    the arrays are only synced and the metadata lines are the ones hashed with them."""
    _validate_shapes(images, masks, len(image_meta))
    originals = {"images.npy": images, "masks.npy": masks}
    in_place = {  # the arrays create_arrays mapped from these files
        name: array for name, array in originals.items() if _in_place(array, folder / name)
    }
    if hashes is not None and (hashes.done != images.shape[0] or len(in_place) != len(originals)):
        raise ValueError(f"hashes cover {hashes.done} of {images.shape[0]} images drawn in place")
    images = np.ascontiguousarray(images, dtype=np.float32)  # a view: no longer an np.memmap
    masks = np.ascontiguousarray(masks, dtype=np.uint8)
    contiguous = {"images.npy": images, "masks.npy": masks}
    if hashes is None:
        meta_lines, defect_lines = _jsonl_lines(image_meta), _jsonl_lines(defects)
    else:
        meta_lines, defect_lines = hashes.meta_lines, hashes.defect_lines

    def big_file(name: str) -> str:
        if hashes is not None:  # hashed while drawn: only the sync is left
            _flush_and_sync(in_place[name])
            return str(hashes.files[name].hexdigest())
        if name in in_place:
            return _sync_npy(in_place[name])
        return _write_npy(folder / name, contiguous[name])

    def content() -> str:
        if hashes is None:
            return _content_hash(images, masks, meta_lines, defect_lines)
        digest = hashes.content  # the images are in it already (see SplitHashes)
        digest.update(masks.data)
        for lines in (meta_lines, defect_lines):
            digest.update(b"".join(lines))
        return str(digest.hexdigest())

    with ThreadPoolExecutor(3, thread_name_prefix="split") as pool:
        # Writing, syncing and sha256 release the GIL: the big files and the content hash overlap.
        jobs = {name: pool.submit(big_file, name) for name in ("images.npy", "masks.npy")}
        digest = pool.submit(content)
        files = {
            "images.jsonl": _write_lines(folder / "images.jsonl", meta_lines),
            "defects.jsonl": _write_lines(folder / "defects.jsonl", defect_lines),
        }
        files.update({name: job.result() for name, job in jobs.items()})
        _write_manifest(folder, manifest, images.shape, len(defects), files, digest.result())


def _write_manifest(
    folder: Path,
    manifest: Mapping[str, object],
    shape: tuple[int, ...],
    n_defects: int,
    files: dict[str, str],
    content: str,
) -> None:
    full = dict(manifest)
    full.update(
        manifest_version=MANIFEST_VERSION,
        count=int(shape[0]),
        shape=list(shape[1:]),
        n_defects=n_defects,
        files={name: files[name] for name in SPLIT_FILES if name != "manifest.json"},
        content_hash=content,
    )
    _write_lines(folder / "manifest.json", [json.dumps(full, sort_keys=True, indent=2).encode()])


def _in_place(array: np.ndarray, path: Path) -> TypeGuard[np.memmap]:
    """True when ``array`` is the mapping of ``path`` that ``create_arrays`` made."""
    if not isinstance(array, np.memmap) or array.filename is None:
        return False
    return Path(array.filename).resolve() == path.resolve()
