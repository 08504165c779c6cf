"""Turn a split's metadata and a model's outcomes into slice units.

Defect units carry the defect's own attributes plus those of its image; their outcome is 1 when
the void was missed. Image units carry image attributes; their outcome is 1 - dice. Given a
reference model's outcomes, each unit's outcome becomes candidate minus reference instead
(positive = the candidate is worse there), which is how a planted cause is found.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from analysis.errortypes import ErrorType
from analysis.slices import Units
from synthetic.splits import ImageMeta

# slice attribute -> metadata key; defect keys are looked up on the defect row first, then its image
DEFECT_ATTRIBUTES = {
    "size": "area",
    "contrast": "contrast",
    "shape": "shape",
    "thickness": "thickness",
    "dose": "dose",
    "background": "background",
}
IMAGE_ATTRIBUTES = {"dose": "dose", "background": "background", "thickness": "thickness"}
UNLABELLED = "unlabelled"


def _column(rows: Sequence[Mapping[str, object]], key: str) -> np.ndarray:
    """One attribute of every row, whatever its JSON type (an object array; None where absent)."""
    out = np.empty(len(rows), dtype=object)
    out[:] = [row.get(key) for row in rows]
    return out


def defect_counts(image_ids: Sequence[str], defects: Sequence[Mapping[str, object]]) -> np.ndarray:
    """Number of defect rows per image, in image order."""
    per = Counter(str(d.get("image_id")) for d in defects)
    return np.array([per.get(str(i), 0) for i in image_ids], dtype=float)


def defect_units(
    image_meta: Sequence[ImageMeta],
    defects: Sequence[Mapping[str, object]],
    outcome: Sequence[str],
    reference: Sequence[str] | None = None,
) -> Units:
    """Units over defect rows; rows whose void could not be located are left out."""
    ids = [str(m.get("id")) for m in image_meta]
    index_of = {i: k for k, i in enumerate(ids)}
    keep = [
        k
        for k, d in enumerate(defects)
        if outcome[k] != UNLABELLED
        and str(d.get("image_id")) in index_of
        and (reference is None or reference[k] != UNLABELLED)
    ]
    rows = [defects[k] for k in keep]
    image = np.array([index_of[str(d.get("image_id"))] for d in rows], dtype=int)
    merged = [{**image_meta[i], **d} for i, d in zip(image, rows, strict=True)]
    columns = {attr: _column(merged, key) for attr, key in DEFECT_ATTRIBUTES.items()}
    counts = defect_counts(ids, defects)
    columns["count"] = np.array([counts[i] for i in image], dtype=object)
    missed = np.array([outcome[k] == ErrorType.MISSED.value for k in keep], dtype=float)
    if reference is not None:
        missed -= np.array([reference[k] == ErrorType.MISSED.value for k in keep], dtype=float)
    return Units("defect", columns, missed, image)


def image_units(
    image_meta: Sequence[ImageMeta],
    defects: Sequence[Mapping[str, object]],
    dice: np.ndarray,
    reference_dice: np.ndarray | None = None,
) -> Units:
    """Units over images; outcome 1 - dice, or reference dice - candidate dice."""
    ids = [str(m.get("id")) for m in image_meta]
    columns = {attr: _column(image_meta, key) for attr, key in IMAGE_ATTRIBUTES.items()}
    columns["count"] = defect_counts(ids, defects).astype(object)
    outcome = 1.0 - dice if reference_dice is None else reference_dice - dice
    return Units("image", columns, np.asarray(outcome, dtype=float), np.arange(len(ids)))
