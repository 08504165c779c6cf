"""Dataset versions: immutable ``datasets/<name>/v<k>/{train,dev}/`` with a registry.

A version folder holds the two split folders and ``version.json`` (name, version, parent's
content hash or null, per-split content hashes, the version's own content hash). A split that
did not change is hard-linked from the parent, so versions cost only what changed.
``datasets/registry.json`` lists the approved versions; only those may be trained on by
default (it replaces "labels as at init").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from segfactory.errors import DataError, UsageError
from segfactory.files import staged_dir, write_atomic
from synthetic.splits import read_split

SPLITS = ("train", "dev")
REGISTRY = "registry.json"
# NAME/vK; NAME is one plain folder name under datasets/ ('.' and '..' would leave it)
_REF = re.compile(r"^([A-Za-z0-9_-][A-Za-z0-9_.-]*)/(v\d+)$")


class DatasetVersion(BaseModel):
    """One dataset version on disk."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    path: Path
    train: Path
    dev: Path
    content_hash: str
    split_hashes: dict[str, str]
    parent: str | None  # the parent's content hash
    approved: bool

    @property
    def ref(self) -> str:
        return f"{self.name}/{self.version}"


def _parse_ref(ref: str) -> tuple[str, str]:
    match = _REF.match(ref)
    if not match:
        raise UsageError(f"dataset version {ref!r} must look like NAME/vK, e.g. synthetic/v1")
    return match.group(1), match.group(2)


def _registry(root: Path) -> dict[str, dict[str, str]]:
    path = Path(root) / "datasets" / REGISTRY
    if not path.is_file():
        return {}
    data: dict[str, dict[str, str]] = json.loads(path.read_text()).get("approved", {})
    return data


def _version_hash(split_hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(split_hashes, sort_keys=True).encode()).hexdigest()


def resolve(home_root: Path, ref: str) -> DatasetVersion:
    """The version ``NAME/vK`` of the home; DataError if it does not exist or is inconsistent."""
    name, version = _parse_ref(ref)
    path = Path(home_root) / "datasets" / name / version
    meta_path = path / "version.json"
    if not meta_path.is_file():
        raise DataError(f"dataset version {ref} not found under {Path(home_root) / 'datasets'}")
    meta = json.loads(meta_path.read_text())
    registry = _registry(home_root)
    return DatasetVersion(
        name=name,
        version=version,
        path=path,
        train=path / "train",
        dev=path / "dev",
        content_hash=meta["content_hash"],
        split_hashes=meta["splits"],
        parent=meta["parent"],
        approved=registry.get(ref, {}).get("content_hash") == meta["content_hash"],
    )


def approved(home_root: Path) -> list[DatasetVersion]:
    """Every approved version, in registry order."""
    return [resolve(home_root, ref) for ref in _registry(home_root)]


def approve(home_root: Path, ref: str) -> DatasetVersion:
    """Add a version to the registry of approved versions (atomic rewrite)."""
    found = resolve(home_root, ref)
    entries = _registry(home_root)
    entries[ref] = {"content_hash": found.content_hash, "approved_at": str(time.time())}
    path = Path(home_root) / "datasets" / REGISTRY
    write_atomic(path, json.dumps({"approved": entries}, indent=2, sort_keys=True) + "\n")
    return found.model_copy(update={"approved": True})


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link every file of a split folder (copy when links are impossible)."""
    dst.mkdir(mode=0o755)
    for item in src.iterdir():
        try:
            os.link(item, dst / item.name)
        except OSError:
            shutil.copy2(item, dst / item.name)


def _next_version(folder: Path) -> str:
    numbers = [int(p.name[1:]) for p in folder.glob("v*") if p.name[1:].isdigit()] if folder.is_dir() else []
    return f"v{max(numbers, default=0) + 1}"


def create_version(
    home_root: Path,
    name: str,
    splits: dict[str, Path | None],
    parent: str | None = None,
    *,
    approve_it: bool = False,
) -> DatasetVersion:
    """Create the next version of ``name`` from split folders.

    ``splits`` maps ``train``/``dev`` to a split folder to take (hard-linked), or to None to keep
    the parent's split unchanged (hard-linked from the parent). Built in a hidden sibling,
    then renamed; existing versions are never touched.
    """
    unknown = set(splits) - set(SPLITS)
    if unknown:
        raise UsageError(f"unknown splits {sorted(unknown)}; a version holds {', '.join(SPLITS)}")
    base = resolve(home_root, parent) if parent else None
    folder = Path(home_root) / "datasets" / name
    folder.mkdir(parents=True, exist_ok=True)
    version = _next_version(folder)
    with staged_dir(folder / version, mode=0o755) as staging:
        hashes = {}
        for split in SPLITS:
            source = splits.get(split) or (getattr(base, split) if base else None)
            if source is None:
                raise UsageError(f"split {split} not given and there is no parent to take it from")
            _link_tree(Path(source), staging / split)
            hashes[split] = read_split(staging / split, mmap=True).content_hash
        meta = {
            "name": name,
            "version": version,
            "parent": base.content_hash if base else None,
            "parent_ref": base.ref if base else None,
            "splits": hashes,
            "content_hash": _version_hash(hashes),
            "created": time.time(),
        }
        (staging / "version.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    ref = f"{name}/{version}"
    return approve(home_root, ref) if approve_it else resolve(home_root, ref)
