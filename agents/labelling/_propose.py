"""``label propose``: auto-label unlabelled images for a person's review.

Regions are proposed cheaply by the classical detector (the home's ``baseline-classical.onnx``),
then segmented by the current best model inside each proposal's box (grown by
``BOX_MARGIN_PX``); components the model finds outside every proposal are kept too (source
``model``). Every mask carries a confidence: the model's mean probability over the mask's pixels.
Both models run through the confined scorer. The queue names the split's content hash, so a
review decision against a stale dataset version can be refused later.
"""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import ndimage

from segfactory.errors import DataError

BOX_MARGIN_PX = 2  # a proposal box is grown by this many pixels before the model segments inside it
THRESHOLD = 0.5  # probability threshold of both the classical detector and the model
MAX_ITEMS = 100_000  # past this many masks: DataError (a queue nobody can review)
EIGHT = np.ones((3, 3), dtype=bool)  # 8-connectivity, as the metrics count objects

Scorer = Any  # (model path, images (N, H, W)) -> prob (N, 1, H, W); runner.default_scorer


class QueueItem(BaseModel):
    """One proposed mask: its box, its bits inside the box, and the model's confidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item_id: str
    image_index: int
    image_sha256: str
    bbox: tuple[int, int, int, int]  # y0, x0, y1, x1 (end exclusive)
    mask_bits: str  # base64 of np.packbits of the (y1-y0, x1-x0) boolean crop, row-major
    area: int
    confidence: float = Field(ge=0, le=1)
    source: Literal["classical+model", "model"]


class ReviewQueue(BaseModel):
    """What `label propose` writes and the console's review reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    data: str  # the split folder
    data_content_hash: str  # decisions against another hash are stale
    model: str
    model_sha256: str
    proposer: str
    created: float = Field(default_factory=time.time)
    n_images: int
    items: list[QueueItem]


def decode_mask(item: QueueItem, shape: tuple[int, int]) -> np.ndarray:
    """The item's full-image boolean mask."""
    y0, x0, y1, x1 = item.bbox
    bits = np.unpackbits(np.frombuffer(base64.b64decode(item.mask_bits), dtype=np.uint8))
    out = np.zeros(shape, dtype=bool)
    out[y0:y1, x0:x1] = bits[: (y1 - y0) * (x1 - x0)].reshape(y1 - y0, x1 - x0).astype(bool)
    return out


def propose(
    images: np.ndarray, hashes: list[str], model: Path, proposer: Path, scorer: Scorer
) -> list[QueueItem]:
    """Proposals from ``proposer``, segmented by ``model``; one item per mask."""
    classical = np.asarray(scorer(proposer, images))[:, 0] >= THRESHOLD  # (N, H, W)
    prob = np.asarray(scorer(model, images))[:, 0]  # (N, H, W)
    items: list[QueueItem] = []
    for i in range(images.shape[0]):
        items.extend(_image_items(i, hashes[i], classical[i], prob[i]))
        if len(items) > MAX_ITEMS:
            raise DataError(
                f"more than {MAX_ITEMS} proposed masks; the model fires everywhere, review is pointless"
            )
    return items


def _image_items(index: int, sha: str, classical: np.ndarray, prob: np.ndarray) -> list[QueueItem]:
    model_mask = prob >= THRESHOLD
    covered = np.zeros_like(model_mask)
    items = []
    labels, n = ndimage.label(classical, structure=EIGHT)
    for box in ndimage.find_objects(labels)[:n]:
        region = _grown(box, prob.shape)
        inside = np.zeros_like(model_mask)
        inside[region] = model_mask[region]
        covered |= inside
        items.extend(_components(index, sha, inside, prob, "classical+model"))
    items.extend(_components(index, sha, model_mask & ~covered, prob, "model"))
    return items


def _grown(box: tuple[slice, slice], shape: tuple[int, ...]) -> tuple[slice, slice]:
    ys, xs = box
    return (
        slice(max(ys.start - BOX_MARGIN_PX, 0), min(ys.stop + BOX_MARGIN_PX, shape[0])),
        slice(max(xs.start - BOX_MARGIN_PX, 0), min(xs.stop + BOX_MARGIN_PX, shape[1])),
    )


def _components(index: int, sha: str, mask: np.ndarray, prob: np.ndarray, source: str) -> list[QueueItem]:
    labels, n = ndimage.label(mask, structure=EIGHT)
    items = []
    for k, (ys, xs) in enumerate(ndimage.find_objects(labels)[:n], start=1):
        crop = labels[ys, xs] == k
        conf = float(prob[ys, xs][crop].mean())
        bits = base64.b64encode(np.packbits(crop.ravel()).tobytes()).decode()
        key = hashlib.sha256(f"{sha}:{ys.start}:{xs.start}:{ys.stop}:{xs.stop}:{bits}".encode()).hexdigest()[
            :16
        ]
        items.append(
            QueueItem(
                item_id=key,
                image_index=index,
                image_sha256=sha,
                bbox=(ys.start, xs.start, ys.stop, xs.stop),
                mask_bits=bits,
                area=int(crop.sum()),
                confidence=min(max(conf, 0.0), 1.0),
                source=source,
            )
        )
    return items
