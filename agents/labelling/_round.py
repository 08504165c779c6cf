"""A labelling round opens: the proposed masks become a dataset version with a console review queue.

``label propose`` on a split folder writes its :class:`ReviewQueue`; :func:`open_round` then
creates ``<name>/vK`` (train: the unlabelled images with the union of their proposed masks; dev:
the base version's dev, hard-linked) and the console's queue for it,
``<home>/curation/<name>/vK/label-review.jsonl`` (least confident first), beside
``round.json`` (:class:`RoundInfo`), which ties the version to its proposals for ``label finetune``.
In the console a person keeps (the proposal is right), fixes (draws the right mask) or drops
(the image is unusable) each image; decisions are saved per image (``console._labels``).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agents.labelling._propose import QueueItem, ReviewQueue, decode_mask
from segfactory.errors import DataError, UsageError
from segfactory.home import Home
from synthetic.exchange import component_rows
from synthetic.splits import Split, read_split, write_split
from synthetic.versions import DatasetVersion, approved, create_version, resolve

ROUND_FILE = "round.json"  # <home>/curation/<name>/vK/round.json
QUEUE_FILE = "label-review.jsonl"  # the console's queue file (console._labels.QUEUE_FILE)
DEFAULT_NAME = "labels"  # dataset name of labelling rounds


class RoundInfo(BaseModel):
    """What ties a round's dataset version to its proposals."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    ref: str  # NAME/vK: the proposed labels, reviewed in the console
    base: str  # the labelled version whose train split the reviewed labels join and whose dev judges
    queue: str  # the ReviewQueue file of `label propose`
    data: str  # the unlabelled split folder
    data_content_hash: str
    model: str  # the model that proposed the masks
    model_sha256: str
    created: float = Field(default_factory=time.time)


def default_base(home: Home) -> DatasetVersion:
    """The first approved version that is not itself a labelling round (the home's `init` data)."""
    for version in approved(home.root):
        if not (home.root / "curation" / version.name / version.version / ROUND_FILE).is_file():
            return version
    raise UsageError("no approved labelled dataset to judge the round on; pass --base NAME/vK")


def open_round(
    home: Home,
    queue: ReviewQueue,
    queue_path: Path,
    *,
    base: DatasetVersion | None = None,
    name: str = DEFAULT_NAME,
) -> RoundInfo:
    """The proposed labels as the next version of ``name``, with its console review queue."""
    base = base or default_base(home)
    split = read_split(Path(queue.data))
    if split.content_hash != queue.data_content_hash:
        raise DataError(f"{queue.data} changed since the masks were proposed; run `label propose` again")
    base_dev = read_split(base.dev, mmap=True)
    if split.images.shape[1:] != base_dev.images.shape[1:]:
        raise DataError(
            f"the unlabelled images are {split.images.shape[1:]} but {base.ref} holds "
            f"{base_dev.images.shape[1:]}; label images of the base's size"
        )
    masks = proposed_masks(queue, split.images.shape)
    with tempfile.TemporaryDirectory(prefix=".label-round-", dir=home.datasets) as tmp:
        train = _proposed_split(split, masks, queue, Path(tmp) / "train")
        created = create_version(home.root, name, {"train": train, "dev": base.dev})
    info = RoundInfo(
        ref=created.ref,
        base=base.ref,
        queue=str(queue_path),
        data=queue.data,
        data_content_hash=queue.data_content_hash,
        model=queue.model,
        model_sha256=queue.model_sha256,
    )
    folder = home.root / "curation" / created.name / created.version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / QUEUE_FILE).write_text("".join(row + "\n" for row in _queue_rows(queue)))
    (folder / ROUND_FILE).write_text(info.model_dump_json(indent=1))
    return info


def load_round(home: Home, ref: str) -> RoundInfo:
    """The round of ``ref``; UsageError when ``ref`` is not a labelling round."""
    found = resolve(home.root, ref)
    path = home.root / "curation" / found.name / found.version / ROUND_FILE
    if not path.is_file():
        raise UsageError(
            f"{ref} is not a labelling round (no {ROUND_FILE}); `label propose --data D` opens one"
        )
    return RoundInfo.model_validate_json(path.read_text())


def rounds(home: Home) -> list[RoundInfo]:
    """Every labelling round of the home, oldest first."""
    root = home.root / "curation"
    found = (
        [RoundInfo.model_validate_json(p.read_text()) for p in root.glob(f"*/v*/{ROUND_FILE}")]
        if root.is_dir()
        else []
    )
    return sorted(found, key=lambda r: r.created)


def proposed_masks(queue: ReviewQueue, shape: tuple[int, ...]) -> np.ndarray:
    """(N, H, W) uint8: the union of every image's proposed masks."""
    masks = np.zeros(shape, dtype=np.uint8)
    hw = (int(shape[1]), int(shape[2]))
    for item in queue.items:
        masks[item.image_index] |= decode_mask(item, hw).astype(np.uint8)
    return masks


def _proposed_split(split: Split, masks: np.ndarray, queue: ReviewQueue, out: Path) -> Path:
    images = np.asarray(split.images)
    defects = [row for i in range(len(split)) for row in component_rows(i, images[i], masks[i])]
    manifest = {
        "generator": split.manifest.get("generator", "import"),
        "kind": "auto-labelled",
        "parent": split.content_hash,
        "labelling": {"model_sha256": queue.model_sha256, "items": len(queue.items)},
    }
    return write_split(out, images, masks, list(split.image_meta), defects, manifest)


def _queue_rows(queue: ReviewQueue) -> list[str]:
    """One console queue row per image, the least confident proposals first, no-proposal images last."""
    import json

    by_image: dict[int, list[QueueItem]] = {i: [] for i in range(queue.n_images)}
    for item in queue.items:
        by_image[item.image_index].append(item)

    def order(i: int) -> tuple[int, float]:
        items = by_image[i]
        return (1, 0.0) if not items else (0, min(it.confidence for it in items))

    rows = []
    for rank, i in enumerate(sorted(by_image, key=order)):
        items = by_image[i]
        low = min((it.confidence for it in items), default=None)
        reason = (
            f"auto-label: {len(items)} mask{'s' if len(items) != 1 else ''}, lowest confidence {low:.2f}"
            if low is not None
            else "auto-label: no void proposed"
        )
        rows.append(
            json.dumps(
                {
                    "split": "train",
                    "image_id": i,
                    "rank": rank,
                    "score": None if low is None else round(low, 4),
                    "reason": reason,
                }
            )
        )
    return rows
