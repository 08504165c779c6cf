"""The training manifest, computed on the host from the dataset version it mounted (rule 6).

Nothing here reads the sandbox workspace: the image hashes come from the split folders the
host bind-mounted read-only at ``/data``, recomputed from the arrays and checked against the
version's own ``images.jsonl`` and ``manifest.json``, so a dataset changed under a run is caught.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from segfactory.errors import DataError
from synthetic.splits import Split, content_hash, image_sha256, read_split


class SplitDigest(BaseModel):
    """One mounted split, as the host recomputed it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    count: int
    shape: list[int]  # (H, W) of every image
    content_hash: str  # synthetic.splits.content_hash over arrays and metadata
    image_hashes_sha256: str  # sha256 over the ordered, newline-joined per-image hashes


class TrainingManifest(BaseModel):
    """What a ticket's model was trained on; ``image_hashes`` lists every training image."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train: SplitDigest
    dev: SplitDigest
    image_hashes: list[str]  # train images in order, sha256 of each float32 row

    def summary(self) -> dict[str, object]:
        """The manifest without the per-image list (what goes into records and the audit log)."""
        return {"train": self.train.model_dump(), "dev": self.dev.model_dump()}


def _digest(split: Split, path: Path) -> tuple[SplitDigest, list[str]]:
    hashes = [image_sha256(image) for image in split.images]
    recorded = [str(row.get("sha256", "")) for row in split.image_meta]
    if hashes != recorded:
        bad = next(i for i, (a, b) in enumerate(zip(hashes, recorded, strict=True)) if a != b)
        raise DataError(
            f"{path}: image {bad} does not match its images.jsonl hash; the dataset "
            "version was modified after it was written; restore it or make a new version"
        )
    full = content_hash(split.images, split.masks, split.image_meta, split.defects)
    if split.content_hash and full != split.content_hash:
        raise DataError(
            f"{path}: content hash {full[:12]}... differs from manifest.json's "
            f"{split.content_hash[:12]}...; the dataset version was modified"
        )
    listing = hashlib.sha256("\n".join(hashes).encode()).hexdigest()
    return SplitDigest(
        path=str(path),
        count=len(split),
        shape=list(split.images.shape[1:]),
        content_hash=full,
        image_hashes_sha256=listing,
    ), hashes


def training_manifest(train_dir: Path, dev_dir: Path) -> TrainingManifest:
    """Recompute the manifest of a dataset version's train/ and dev/ split folders."""
    train, train_hashes = _digest(read_split(train_dir, mmap=True), train_dir)
    dev, _ = _digest(read_split(dev_dir, mmap=True), dev_dir)
    return TrainingManifest(train=train, dev=dev, image_hashes=train_hashes)


def write_manifest(manifest: TrainingManifest, path: Path) -> None:
    """Write the full manifest (with every image hash) as JSON."""
    path.write_text(json.dumps(manifest.model_dump(), sort_keys=True) + "\n")
