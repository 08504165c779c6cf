"""Which data a model was trained on, and whether a set lies outside its training range.

The training data of a model is found, in this order:

1. an explicit ``--train-data``: a dataset version folder (its ``train/``), a split folder, or a
   ``NAME/vK`` reference into the home's ``datasets/``;
2. the training manifest the runner's host side writes beside a ticket's ``model.onnx``
   (``manifest.json`` with ``train.path`` and ``train.content_hash``);
3. ``training_data.json``, which ``segfactory train`` writes into its run folder on the host,
   holding the train split's path, content hash and intensity statistics.

Records 2 and 3 name the train split by content hash; a split at that path with another hash
is not the training data, and the range is then unknown, said with the reason. Record 3 keeps
the statistics themselves, so a model's range stays known after its data is removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from segfactory.errors import DataError
from segfactory.files import write_atomic
from segfactory.records import Result
from synthetic.intensity import IntensityStats, StatRange, compare, split_stats
from synthetic.splits import read_split
from synthetic.versions import resolve

TRAINING_RECORD = "training_data.json"  # written by `segfactory train` beside model.onnx
TICKET_MANIFEST = "manifest.json"  # the runner's host-computed training manifest beside a ticket's model
RECORD_VERSION = 1


class TrainingData(BaseModel):
    """The training data of a model: where it was found and its statistics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str  # --train-data | training manifest | training_data.json
    train_split: str
    stats: IntensityStats


def _train_split_dir(ref: Path | str, home_root: Path | None) -> Path:
    path = Path(ref).expanduser()
    if path.is_dir():
        return path / "train" if (path / "train").is_dir() and not (path / "images.npy").exists() else path
    if home_root is not None and "/" in str(ref) and not Path(ref).is_absolute():
        return resolve(home_root, str(ref)).train
    raise DataError(
        f"--train-data {ref}: not a dataset version folder, a split folder, or a NAME/vK "
        "dataset version of the home"
    )


def _from_split(folder: Path, source: str, expected_hash: str | None) -> TrainingData:
    split = read_split(folder, mmap=True)
    if expected_hash is not None and split.content_hash != expected_hash:
        raise DataError(
            f"{folder} holds content {split.content_hash[:12]}..., but the model's {source} "
            f"names {expected_hash[:12]}...; its training data is no longer there"
        )
    return TrainingData(source=source, train_split=str(folder), stats=split_stats(split))


def _from_records(model_dir: Path) -> TrainingData | None:
    record = model_dir / TRAINING_RECORD
    if record.is_file():
        data = json.loads(record.read_text())
        return TrainingData(
            source=TRAINING_RECORD,
            train_split=str(data["train"]),
            stats=IntensityStats.model_validate(data["intensity"]),
        )
    manifest = model_dir / TICKET_MANIFEST
    if manifest.is_file():
        train = json.loads(manifest.read_text()).get("train")
        if isinstance(train, dict) and "path" in train and "content_hash" in train:
            return _from_split(Path(train["path"]), "training manifest", str(train["content_hash"]))
    return None


def find_training_data(
    model: Path, train_data: Path | str | None = None, home_root: Path | None = None
) -> TrainingData | None:
    """The model's training data (None when nothing records it); DataError when a record is stale."""
    if train_data is not None:
        return _from_split(_train_split_dir(train_data, home_root), "--train-data", None)
    return _from_records(model.parent if model.suffix == ".onnx" else model)


class TrainingRange(Result):
    """A set against a model's training data, and how to read zero detections on it.

    Dumped with ``exclude_unset`` (``as_json``): a range that is not known has ``reason`` and no
    comparison; ``set`` is left out where the set's statistics are given once elsewhere (a
    milestone's tier); the finding keys come with ``collapse_finding``; ``model`` where a command
    says which model's training data it read.
    """

    known: bool
    outside: bool | None  # None: unknown
    reason: str | None = None  # why it is unknown
    source: str | None = None  # where the training data was found
    train_split: str | None = None
    stats: dict[str, StatRange | None] | None = None
    reasons: list[str] | None = None  # each statistic outside its bound, in words
    bound: str | None = None
    set: IntensityStats | None = None
    train: IntensityStats | None = None
    model: str | None = None
    zero_detections: bool | None = None
    finding: Literal["shift", "model", "unknown"] | None = None
    message: str | None = None


def unknown_range(reason: str) -> TrainingRange:
    return TrainingRange(known=False, outside=None, reason=reason)


def training_range(
    seen: IntensityStats,
    model: Path,
    train_data: Path | str | None = None,
    home_root: Path | None = None,
    *,
    with_set: bool = True,
) -> TrainingRange:
    """``seen`` against the model's training data (``outside`` None when unknown); ``with_set``
    False leaves ``seen`` itself out (a milestone gives a tier's statistics once)."""
    shown = {"set": seen} if with_set else {}
    try:
        found = find_training_data(model, train_data, home_root)
    except (DataError, OSError, ValueError, KeyError) as exc:
        return TrainingRange(known=False, outside=None, reason=str(exc), **shown)
    if found is None:
        return TrainingRange(
            known=False,
            outside=None,
            reason=f"nothing beside {model} records its training data ({TRAINING_RECORD} or a "
            f"training {TICKET_MANIFEST}); pass --train-data",
            **shown,
        )
    check = compare(seen, found.stats)
    return TrainingRange(
        known=True,
        source=found.source,
        train_split=found.train_split,
        outside=check.outside,
        stats=check.stats,
        reasons=check.reasons,
        bound=check.bound,
        train=found.stats,
        **shown,
    )


def collapse_finding(block: TrainingRange, n_detections: int, n_voids: int) -> TrainingRange:
    """Add the reading of zero detections: on a set outside the training range it is a shift."""
    zero = n_detections == 0 and n_voids > 0
    finding: Literal["shift", "model", "unknown"] | None = None
    if zero:
        finding = "shift" if block.outside else ("model" if block.outside is False else "unknown")
    message = None
    if finding == "shift":
        message = (
            "no void detected on a set outside the model's training range: a shift in the data, not a "
            "finding about the model; check the import's intensity mapping (data import --bit-depth, "
            "--window, --percentile)"
        )
    return block.model_copy(update={"zero_detections": zero, "finding": finding, "message": message})


def write_training_record(out: Path, data: Path) -> Path:
    """Write ``training_data.json`` into a run folder for the dataset version ``data`` (atomic)."""
    folder = data / "train" if (data / "train").is_dir() else data
    split = read_split(folder, mmap=True)
    record = {
        "version": RECORD_VERSION,
        "data": str(data.resolve()),
        "train": str(folder.resolve()),
        "content_hash": split.content_hash,
        "intensity": split_stats(split).model_dump(mode="json"),
    }
    target = out / TRAINING_RECORD
    write_atomic(target, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return target
