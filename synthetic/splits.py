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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from segfactory.errors import DataError
from segfactory.files import staged_dir
from segfactory.records import sha256_file

SPLIT_FILES = ("images.npy", "masks.npy", "images.jsonl", "defects.jsonl", "manifest.json")
MANIFEST_VERSION = 1


def image_sha256(image: np.ndarray) -> str:
    """The per-image hash recorded in ``images.jsonl``: sha256 of the float32 row's bytes."""
    return hashlib.sha256(np.ascontiguousarray(image, dtype=np.float32).data).hexdigest()  # .data: no copy


@dataclass
class Split:
    """An in-memory (or memory-mapped) split folder."""

    path: Path | None
    images: np.ndarray  # (N, H, W) float32 in [0, 1]
    masks: np.ndarray  # (N, H, W) uint8 in {0, 1}
    image_meta: list[dict[str, Any]]
    defects: list[dict[str, Any]]
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def content_hash(self) -> str:
        """A hash over the split's array and metadata hashes (what a version names its parent by)."""
        return str(self.manifest.get("content_hash", ""))


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
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


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")


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
    images, masks = split.images, split.masks
    if images.ndim != 3 or images.dtype != np.float32:
        raise DataError(f"images must be float32 (N, H, W); got {images.dtype} {images.shape}")
    if masks.shape != images.shape or masks.dtype != np.uint8:
        raise DataError(
            f"masks must be uint8 with the images' shape {images.shape}; got {masks.dtype} {masks.shape}"
        )
    if len(split.image_meta) != images.shape[0]:
        raise DataError(f"images.jsonl has {len(split.image_meta)} rows for {images.shape[0]} images")


def content_hash(
    images: np.ndarray, masks: np.ndarray, image_meta: list[dict[str, Any]], defects: list[dict[str, Any]]
) -> str:
    """One hash for the whole split's content, independent of file layout."""
    digest = hashlib.sha256()
    digest.update(
        np.ascontiguousarray(images, dtype=np.float32).data
    )  # .data, not .tobytes(): no 400 MB copy
    digest.update(np.ascontiguousarray(masks, dtype=np.uint8).data)
    for rows in (image_meta, defects):
        for row in rows:
            digest.update(json.dumps(row, sort_keys=True).encode())
    return digest.hexdigest()


def write_split(
    path: Path | str,
    images: np.ndarray,
    masks: np.ndarray,
    image_meta: list[dict[str, Any]],
    defects: list[dict[str, Any]],
    manifest: dict[str, Any],
) -> Path:
    """Write a split folder atomically (temporary sibling, then rename) and return its path.

    Refuses to replace an existing folder. ``manifest`` gets counts, file hashes and the
    content hash added; the caller supplies generator version, parameters and parent.
    """
    target = Path(path)
    if target.exists():
        raise DataError(f"{target} already exists; split folders are immutable, choose a new --out")
    split = Split(None, images, masks, image_meta, defects, manifest)
    validate_shapes(split)
    # open splits are readable (0755; the vault folder guards the tiers)
    with staged_dir(target, mode=0o755) as tmp:
        np.save(tmp / "images.npy", np.ascontiguousarray(images, dtype=np.float32))
        np.save(tmp / "masks.npy", np.ascontiguousarray(masks, dtype=np.uint8))
        _write_jsonl(tmp / "images.jsonl", image_meta)
        _write_jsonl(tmp / "defects.jsonl", defects)
        full = dict(manifest)
        full.update(
            manifest_version=MANIFEST_VERSION,
            count=int(images.shape[0]),
            shape=list(images.shape[1:]),
            n_defects=len(defects),
            files={name: sha256_file(tmp / name) for name in SPLIT_FILES if name != "manifest.json"},
            content_hash=content_hash(images, masks, image_meta, defects),
        )
        (tmp / "manifest.json").write_text(json.dumps(full, sort_keys=True, indent=2) + "\n")
        for name in SPLIT_FILES:
            fd = os.open(tmp / name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    return target
