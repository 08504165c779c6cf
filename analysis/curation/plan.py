"""Curation plans and applying them as a new dataset version.

A plan names the dataset version it was made for (``NAME/vK`` and its content hash) and lists
items: remove, oversample (repeat ``times`` more) or redraw (a label change: the mask is
replaced by ``mask_file``'s array). ``apply_plan`` writes the next version of the dataset
(``synthetic.versions.create_version``: immutable, the parent's hash recorded, an unchanged split
hard-linked) and keeps the old one. A plan without label changes is registered as approved; a
plan that changes labels leaves the new version unapproved and records a pending approval under
``datasets/approvals/pending/`` for a person (``segfactory approvals`` decides it).
Applying the same plan twice is refused (``datasets/<name>/plans.json`` records applied plans).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from segfactory.errors import DataError, UsageError
from segfactory.files import write_atomic
from synthetic.splits import read_split, write_split
from synthetic.versions import DatasetVersion, create_version, resolve

PLAN_SCHEMA = 1
MAX_OVERSAMPLE = 10  # an item is repeated at most this many extra times


class Action(StrEnum):
    REMOVE = "remove"
    OVERSAMPLE = "oversample"
    REDRAW = "redraw"


class PlanItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    split: Literal["train", "dev"]
    image_id: int = Field(ge=0)
    action: Action
    reason: str = Field(min_length=1)
    times: int = Field(default=1, ge=1, le=MAX_OVERSAMPLE)  # extra copies, for oversample
    mask_file: str | None = None  # .npy (H, W) uint8 {0,1}, for redraw


class Plan(BaseModel):
    """What to change in one dataset version, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1  # PLAN_SCHEMA
    kind: Literal["images", "defects", "control"]
    dataset: str  # NAME/vK
    content_hash: str  # of that version
    items: list[PlanItem]
    note: str = ""

    @property
    def changes_labels(self) -> bool:
        return any(item.action == Action.REDRAW for item in self.items)

    @property
    def plan_hash(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


def write_plan(plan: Plan, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(plan.model_dump_json(indent=2) + "\n")
    return path


def read_plan(path: Path) -> Plan:
    if not Path(path).is_file():
        raise UsageError(f"plan {path} not found; make one with `segfactory curate images|defects --data D`")
    try:
        return Plan.model_validate_json(Path(path).read_text())
    except ValidationError as exc:
        raise DataError(f"plan {path} is not a valid curation plan: {exc.errors()[0]['msg']}") from None


def check_plan(plan: Plan, version: DatasetVersion) -> None:
    """Raise DataError unless the plan fits this exact version and names existing items."""
    if plan.content_hash != version.content_hash:
        raise DataError(
            f"plan was made for {plan.dataset} with content hash {plan.content_hash[:12]}…, "
            f"but {version.ref} has {version.content_hash[:12]}…; make a new plan for it"
        )
    for split in ("train", "dev"):
        n = len(read_split(getattr(version, split), mmap=True))
        missing = sorted({it.image_id for it in plan.items if it.split == split and it.image_id >= n})
        if missing:
            raise DataError(
                f"plan names {split} images {missing[:10]} that do not exist ({split} has {n} images)"
            )
    if not plan.items:
        raise DataError("the plan lists no items; there is nothing to apply")


def applied_plans(home_root: Path, name: str) -> dict[str, str]:
    """Plans already applied to dataset ``name``: plan hash -> the version it made."""
    path = home_root / "datasets" / name / "plans.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _record_applied(home_root: Path, name: str, plan_hash: str, ref: str) -> None:
    entries = applied_plans(home_root, name) | {plan_hash: ref}
    path = home_root / "datasets" / name / "plans.json"
    write_atomic(path, json.dumps(entries, indent=2, sort_keys=True) + "\n")


def _curated_split(src: Path, items: list[PlanItem], out: Path) -> Path:
    """Write ``src`` with the items applied to ``out`` (a new split folder)."""
    split = read_split(src, mmap=True)
    removed = {it.image_id for it in items if it.action == Action.REMOVE}
    extra = {it.image_id: it.times for it in items if it.action == Action.OVERSAMPLE}
    redraw = {it.image_id: it.mask_file for it in items if it.action == Action.REDRAW}
    order = [i for i in range(len(split)) if i not in removed]
    order += [i for i in order if i in extra for _ in range(extra[i])]
    if not order:
        raise DataError(f"the plan removes every image of {src}; a split cannot be empty")
    images = np.asarray(split.images[order])
    masks = np.array(split.masks[order])
    for pos, source in enumerate(order):
        if source in redraw and redraw[source]:
            masks[pos] = np.load(str(redraw[source]), allow_pickle=False).astype(np.uint8)
    metas = []
    for pos, source in enumerate(order):
        metas.append({**split.image_meta[source], "id": pos, "source_id": source})
    defects = [
        {**d, "image_id": pos}
        for pos, source in enumerate(order)
        for d in split.defects
        if d["image_id"] == source
    ]
    manifest = {
        k: v
        for k, v in split.manifest.items()
        if k not in ("count", "shape", "n_defects", "files", "content_hash", "manifest_version")
    }
    manifest["parent"] = split.content_hash
    return write_split(out, images, masks, metas, defects, manifest)


def apply_plan(home_root: Path, plan: Plan) -> tuple[DatasetVersion, bool]:
    """Write the curated version; returns (version, approved). Nothing existing is changed."""
    base = resolve(home_root, plan.dataset)
    check_plan(plan, base)
    done = applied_plans(home_root, base.name)
    if plan.plan_hash in done:
        raise UsageError(
            f"this plan was already applied (it made {done[plan.plan_hash]}); nothing was changed"
        )
    staging = Path(tempfile.mkdtemp(prefix=".curate-", dir=home_root / "datasets"))
    try:
        splits: dict[str, Path | None] = {}
        for split in ("train", "dev"):
            items = [it for it in plan.items if it.split == split]
            splits[split] = _curated_split(getattr(base, split), items, staging / split) if items else None
        version = create_version(
            home_root, base.name, splits, parent=base.ref, approve_it=not plan.changes_labels
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _record_applied(home_root, base.name, plan.plan_hash, version.ref)
    if plan.changes_labels:
        _pending_approval(home_root, plan, version)
    return version, not plan.changes_labels


def _pending_approval(home_root: Path, plan: Plan, version: DatasetVersion) -> Path:
    folder = home_root / "datasets" / "approvals" / "pending"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "kind": "dataset_version",
        "ref": version.ref,
        "content_hash": version.content_hash,
        "plan_hash": plan.plan_hash,
        "reason": "the curation plan changes labels (redraw)",
        "items": [it.model_dump(mode="json") for it in plan.items if it.action == Action.REDRAW],
    }
    path = folder / f"{version.name}-{version.version}.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path
