"""The label-review decisions people saved in the console, as ``label finetune`` reads them.

The console (``console._labels``) writes them to ``console_labels`` in ``state.sqlite``, one row per
image; reading them lives here, below the console, so that the labelling loop never imports the
web console.
"""

from __future__ import annotations

import io
import re
import sqlite3
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from segfactory.errors import UsageError
from segfactory.home import Home

Action = Literal["keep", "fix", "drop"]
_DATASET_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*/v\d+$")


def check_ref(dataset: str) -> str:
    """``NAME/vK`` with a plain name (no path tricks); UsageError otherwise."""
    if not _DATASET_REF.match(dataset):
        raise UsageError(f"{dataset!r} is not a dataset version; expected NAME/vK, e.g. synthetic/v1")
    return dataset


class Decision(BaseModel):
    """One saved review decision, as ``label finetune`` reads it (``mask``: the fix, else None)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    split: str
    image_id: int
    action: Action
    mask: np.ndarray | None  # (H, W) uint8 {0, 1}
    seconds: float


def decisions(home: Home, dataset: str) -> list[Decision]:
    """Every decision saved on ``dataset`` (NAME/vK), by split and image; [] before any review."""
    if not home.state_db.is_file():
        return []
    conn = sqlite3.connect(f"file:{home.state_db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT split, image_id, action, mask, seconds FROM console_labels WHERE dataset = ? "
            "ORDER BY split, image_id",
            (check_ref(dataset),),
        ).fetchall()
    except sqlite3.OperationalError:  # no review table yet
        return []
    finally:
        conn.close()
    return [
        Decision(
            split=r[0],
            image_id=int(r[1]),
            action=r[2],
            mask=np.load(io.BytesIO(r[3])) if r[3] else None,
            seconds=float(r[4]),
        )
        for r in rows
    ]


__all__ = ["Action", "Decision", "check_ref", "decisions"]
