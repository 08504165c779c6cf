"""Label review: a queue of suspected label errors; keep, fix or drop; applied as a new version.

The queue is what ``segfactory curate defects`` writes (``analysis.curation``):
``<home>/curation/<name>/<vK>/label-review.jsonl``, one JSON object a line with ``split``,
``image_id`` (index into the split) and optionally ``rank``, ``score``, ``source``/``reason``.
Decisions go to ``console_labels`` in ``state.sqlite`` (one per image, with the seconds the
person spent) and each is an audit record (actor ``human``). ``apply`` writes the changed splits
and calls ``synthetic.versions.create_version`` with the reviewed version as parent: the old
version is kept. An edit made against a version that is no longer the newest of its dataset, or
against a decision someone else changed meanwhile, is refused with :class:`StaleEdit`.
"""

from __future__ import annotations

import io
import json
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict

from agents.challenge import retractions
from agents.labelling import label_rounds
from agents.labelling.decisions import (  # the finetune reads what people decided here
    Action,
    check_ref,
)
from segfactory.errors import DataError, UsageError
from segfactory.home import Home
from segfactory.records import Actor
from synthetic.exchange import component_rows
from synthetic.splits import Split, read_split, write_split
from synthetic.versions import SPLITS, create_version, resolve

QUEUE_FILE = "label-review.jsonl"
MAX_QUEUE = 1000  # rows read from one queue file; past this the rest wait for the next review
MAX_MASK_PNG_BYTES = 4 * 1024**2  # a submitted mask PNG larger than this is refused

_SCHEMA = """CREATE TABLE IF NOT EXISTS console_labels (
    dataset TEXT NOT NULL, split TEXT NOT NULL, image_id INTEGER NOT NULL, action TEXT NOT NULL,
    mask BLOB, seconds REAL NOT NULL, by TEXT NOT NULL, decided_at REAL NOT NULL, rev INTEGER NOT NULL,
    applied_in TEXT, PRIMARY KEY (dataset, split, image_id))"""


class StaleEdit(UsageError):
    """The edit was made against an old version or an old decision; nothing was saved."""


class QueueItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    dataset: str  # NAME/vK
    split: str
    image_id: int
    rank: int = 0
    score: float | None = None
    reason: str = ""
    action: str | None = None  # the saved decision, if any
    rev: int = 0  # the decision's revision (0: none yet)


class ReviewStats(TypedDict):
    """Label-review figures of one dataset version: decisions by action, confirmed errors, time."""

    dataset: str
    reviewed: int
    keep: int
    fix: int
    drop: int
    confirmed_errors: int  # fix + drop
    human_seconds: float
    human_minutes_per_image: float | None  # None before any review


class AppliedReview(ReviewStats):
    """``LabelDesk.apply``: the figures, the version the decisions became, and its parent."""

    new_version: str
    parent: str


class RetractionRow(TypedDict):
    challenge_id: str
    ticket_id: str
    run_id: str
    kind: str
    reason: str
    demoted: bool


class LoopSummary(TypedDict):
    """For the /labels page: finished labelling rounds and retracted claims (people only)."""

    rounds: list[dict[str, object]]  # LabelRound JSON forms
    retractions: list[RetractionRow]


def queue_datasets(home: Home) -> list[str]:
    """Dataset versions that have a review queue, as NAME/vK."""
    root = home.root / "curation"
    return (
        sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in root.glob(f"*/v*/{QUEUE_FILE}"))
        if root.is_dir()
        else []
    )


def latest_version(home: Home, name: str) -> str:
    folder = home.datasets / name
    numbers = [
        int(p.name[1:]) for p in folder.glob("v*") if p.name[1:].isdigit() and (p / "version.json").is_file()
    ]
    return f"{name}/v{max(numbers)}" if numbers else ""


def image_png(home: Home, dataset: str, split: str, image_id: int, *, mask: bool) -> bytes:
    """One image (grey) or its mask (0/255) as PNG bytes."""
    from PIL import Image

    data = _split(home, dataset, split)
    _check_index(data, image_id)
    array = data.masks[image_id] * 255 if mask else np.clip(np.asarray(data.images[image_id]) * 255, 0, 255)
    out = io.BytesIO()
    Image.fromarray(np.asarray(array, dtype=np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


def _split(home: Home, dataset: str, split: str) -> Split:
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; a version holds {', '.join(SPLITS)}")
    return read_split(getattr(resolve(home.root, check_ref(dataset)), split), mmap=True)


def _check_index(data: Split, image_id: int) -> None:
    if not 0 <= image_id < len(data):
        raise UsageError(f"image {image_id} is not in the split (0..{len(data) - 1})")


def decode_mask(png: bytes, shape: tuple[int, int]) -> np.ndarray:
    """A submitted mask PNG as (H, W) uint8 {0, 1}: any non-zero, non-transparent pixel is a void."""
    from PIL import Image, UnidentifiedImageError

    if len(png) > MAX_MASK_PNG_BYTES:
        raise UsageError(f"the mask PNG holds {len(png)} bytes, more than {MAX_MASK_PNG_BYTES}")
    try:
        image = Image.open(io.BytesIO(png))
        if image.size != (shape[1], shape[0]):
            raise UsageError(f"the mask is {image.size[0]}x{image.size[1]}, the image {shape[1]}x{shape[0]}")
        rgba = np.asarray(image.convert("RGBA"))
    except (UnidentifiedImageError, OSError) as exc:
        raise UsageError(f"the mask is not a readable PNG: {exc}") from exc
    return ((rgba[..., :3].max(axis=2) > 0) & (rgba[..., 3] > 0)).astype(np.uint8)


class LabelDesk:
    """Queue, decisions and their application; thread-safe."""

    def __init__(self, home: Home, sink: Any) -> None:
        self.home, self.sink = home, sink
        self.conn = sqlite3.connect(home.state_db, check_same_thread=False, timeout=30)
        self.conn.execute(_SCHEMA)
        self.conn.commit()
        self._lock = threading.Lock()

    def queue(self, dataset: str) -> list[QueueItem]:
        name, version = check_ref(dataset).split("/", 1)
        path = self.home.root / "curation" / name / version / QUEUE_FILE
        if not path.is_file():
            raise UsageError(f"no label-review queue for {dataset}; run `segfactory curate defects` first")
        saved = {
            (r[0], r[1]): (r[2], r[3])
            for r in self.conn.execute(
                "SELECT split, image_id, action, rev FROM console_labels WHERE dataset = ?", (dataset,)
            )
        }
        items = []
        for line in path.read_text().splitlines()[:MAX_QUEUE]:
            row = json.loads(line)
            split, image_id = str(row.get("split", "train")), int(row["image_id"])
            action, rev = saved.get((split, image_id), (None, 0))
            items.append(
                QueueItem(
                    dataset=dataset,
                    split=split,
                    image_id=image_id,
                    rank=int(row.get("rank", 0)),
                    score=row.get("score"),
                    reason=str(row.get("reason") or row.get("source") or ""),
                    action=action,
                    rev=rev,
                )
            )
        return items

    def decide(
        self,
        dataset: str,
        split: str,
        image_id: int,
        action: Action,
        *,
        by: str,
        seconds: float,
        rev_seen: int,
        mask_png: bytes | None = None,
    ) -> QueueItem:
        """Save one decision; refuses a stale version or a decision changed since ``rev_seen``."""
        self._check_latest(dataset)
        data = _split(self.home, dataset, split)
        _check_index(data, image_id)
        mask = (
            decode_mask(mask_png, data.masks.shape[1:]) if action == "fix" and mask_png is not None else None
        )
        if action == "fix" and mask is None:
            raise UsageError("a fix needs the edited mask (a PNG)")
        with self._lock:
            row = self.conn.execute(
                "SELECT rev, applied_in FROM console_labels WHERE dataset = ? AND split = ? AND image_id = ?",
                (dataset, split, image_id),
            ).fetchone()
            current = row[0] if row else 0
            if current != rev_seen:
                raise StaleEdit(
                    f"image {image_id} of {dataset}/{split} was decided by someone else since you opened "
                    f"it (revision {current}, you saw {rev_seen}); reload it and decide again"
                )
            if row and row[1]:
                raise StaleEdit(
                    f"decisions on {dataset} were already applied as {row[1]}; review that version"
                )
            packed = _pack(mask) if mask is not None else None
            self.conn.execute(
                "INSERT OR REPLACE INTO console_labels VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (dataset, split, image_id, action, packed, float(seconds), by, time.time(), current + 1),
            )
            self.conn.commit()
        self.sink.append(
            Actor.HUMAN.value,
            "label_decision",
            {
                "dataset": dataset,
                "split": split,
                "image_id": image_id,
                "action": action,
                "seconds": round(seconds, 3),
                "by": by,
                "void_px": int(mask.sum()) if mask is not None else None,
                "rev": current + 1,
            },
        )
        return QueueItem(dataset=dataset, split=split, image_id=image_id, action=action, rev=current + 1)

    def stats(self, dataset: str) -> ReviewStats:
        """Reviewed images, suspected errors confirmed (fix + drop), human minutes per image."""
        return _stats(self.conn, dataset)

    def apply(self, dataset: str, *, by: str) -> AppliedReview:
        """The decisions on ``dataset`` as its next version (the old one kept); returns the new ref and
        stats."""
        self._check_latest(dataset)
        with self._lock:
            rows = self.conn.execute(
                "SELECT split, image_id, action, mask FROM console_labels WHERE dataset = ? "
                "AND applied_in IS NULL",
                (dataset,),
            ).fetchall()
            if not any(r[2] in ("fix", "drop") for r in rows):
                raise UsageError(f"no fix or drop decided on {dataset}; nothing to apply")
            name = dataset.split("/", 1)[0]
            with tempfile.TemporaryDirectory(prefix=".label-review-", dir=self.home.datasets) as tmp:
                splits = {
                    s: _edited(self.home, dataset, s, [r for r in rows if r[0] == s], Path(tmp) / s)
                    for s in SPLITS
                    if any(r[0] == s for r in rows)
                }
                created = create_version(self.home.root, name, dict(splits.items()), parent=dataset)
            self.conn.execute(
                "UPDATE console_labels SET applied_in = ? WHERE dataset = ? AND applied_in IS NULL",
                (created.ref, dataset),
            )
            self.conn.commit()
        summary: AppliedReview = {**self.stats(dataset), "new_version": created.ref, "parent": dataset}
        self.sink.append(Actor.HUMAN.value, "label_review_applied", {**summary, "by": by})
        return summary

    def _check_latest(self, dataset: str) -> None:
        resolve(self.home.root, check_ref(dataset))
        newest = latest_version(self.home, dataset.split("/", 1)[0])
        if newest != dataset:
            raise StaleEdit(
                f"{dataset} is no longer the newest version ({newest} is); your edit was made against a "
                f"stale version and was not saved. Review {newest} instead"
            )


def _stats(conn: sqlite3.Connection, dataset: str) -> ReviewStats:
    rows = conn.execute("SELECT action, seconds FROM console_labels WHERE dataset = ?", (dataset,)).fetchall()
    seconds = sum(r[1] for r in rows)
    counts = {a: sum(1 for r in rows if r[0] == a) for a in ("keep", "fix", "drop")}
    return {
        "dataset": dataset,
        "reviewed": len(rows),
        "keep": counts["keep"],
        "fix": counts["fix"],
        "drop": counts["drop"],
        "confirmed_errors": counts["fix"] + counts["drop"],
        "human_seconds": round(seconds, 3),
        "human_minutes_per_image": round(seconds / 60 / len(rows), 3) if rows else None,
    }


def review_stats(home: Home) -> list[ReviewStats]:
    """Label-review figures per reviewed dataset version, for reports (read-only; [] before any review)."""
    if not home.state_db.is_file():
        return []
    conn = sqlite3.connect(f"file:{home.state_db}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT DISTINCT dataset FROM console_labels ORDER BY dataset")]
        return [_stats(conn, name) for name in names]
    except sqlite3.OperationalError:  # no review table yet
        return []
    finally:
        conn.close()


def loop_summary(home: Home) -> LoopSummary:
    """For the /labels page: finished labelling rounds and retracted claims (people only, read-only)."""

    return {
        "rounds": [r.model_dump(mode="json") for r in label_rounds(home)],
        "retractions": [
            {
                "challenge_id": r.challenge_id,
                "ticket_id": r.claim.ticket_id,
                "run_id": r.claim.run_id,
                "kind": r.claim.kind.value,
                "reason": r.reasons[-1] if r.reasons else "",
                "demoted": r.demoted,
            }
            for r in retractions(home)
        ],
    }


def _pack(mask: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, mask.astype(np.uint8))
    return out.getvalue()


def _edited(home: Home, dataset: str, split: str, rows: list[Any], out: Path) -> Path:
    """A copy of the split with fixed masks replaced and dropped images removed."""

    data = _split(home, dataset, split)
    images, masks = np.array(data.images), np.array(data.masks)
    fixed = {int(r[1]): np.load(io.BytesIO(r[3])) for r in rows if r[2] == "fix"}
    dropped = {int(r[1]) for r in rows if r[2] == "drop"}
    for i, mask in fixed.items():
        masks[i] = mask
    keep = [i for i in range(len(data)) if i not in dropped]
    new_index = {old: new for new, old in enumerate(keep)}
    defects = [
        {**d, "image_id": new_index[d["image_id"]]}
        for d in data.defects
        if d["image_id"] in new_index and d["image_id"] not in fixed
    ]
    defects += [
        row for i in fixed if i in new_index for row in component_rows(new_index[i], images[i], masks[i])
    ]
    defects.sort(key=lambda d: d["image_id"])
    manifest = {
        k: v for k, v in data.manifest.items() if k in ("generator", "generator_version", "params", "kind")
    }
    manifest.update(
        parent=data.content_hash, label_review={"fixed": sorted(fixed), "dropped": sorted(dropped)}
    )
    if not keep:
        raise DataError(f"dropping every image of {dataset}/{split} would leave it empty")
    write_split(out, images[keep], masks[keep], [data.image_meta[i] for i in keep], defects, manifest)
    return out
