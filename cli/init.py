"""``segfactory init``: create a factory home sized by a profile.

``initialise`` runs ``STEPS`` in order; each step is small, idempotent (skips what exists) and
may add lines to the summary. Other areas add their set-up (users, the gate's pinned copy,
the ledger, the baseline) by appending one step function to ``STEPS``. The home marker
(``home.json``) is written last, so a home with a marker is complete; running init on it
again reports the existing home and rebuilds nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Required, TypedDict

from agents.run_policy import load_run_defaults
from gate.init_step import init_step as gate_init_step
from segfactory.errors import UsageError
from segfactory.files import write_atomic
from segfactory.home import SOURCE_ROOT, Home
from segfactory.profiles import Profile, get_profile
from synthetic import generate
from synthetic.tiers import TIERS, build_tier, current_version, tier_path, versions
from synthetic.versions import approved, create_version, resolve

LAYOUT_VERSION = 1
TRAIN_SEED = 1  # public seeds of the open splits (anyone may regenerate train and dev)
DEV_SEED = 2
DATASET = "synthetic"  # name of the dataset whose v1 init creates
VAULT_MODE = 0o700  # only the vault's owner (the gate user) may enter it


class TierRow(TypedDict):
    """One held-back tier as ``init`` lists it: no seeds, no labels."""

    tier: str
    version: str
    count: int
    size: int  # the image side
    n_defects: int


class DatasetRow(TypedDict):
    ref: str
    approved: bool
    content_hash: str


class InitSummary(TypedDict, total=False):
    """What ``segfactory init`` prints (``--json``): the steps fill in what they made."""

    home: Required[str]
    existing: Required[bool]
    profile: object  # the profile's name; an existing home's, as its marker file says
    created: object  # epoch seconds, as the home's marker file says
    tiers: list[TierRow]
    datasets: list[DatasetRow]
    gate: dict[str, object]  # gate.init_step's GateInit, in its JSON form


Step = Callable[[Home, Profile, InitSummary], None]


def _layout(home: Home, profile: Profile, summary: InitSummary) -> None:
    for path in (home.root, home.datasets, home.runs, home.audit):
        path.mkdir(parents=True, exist_ok=True)
    home.vault.mkdir(mode=VAULT_MODE, exist_ok=True)
    os.chmod(home.vault, VAULT_MODE)


def _open_dataset(home: Home, profile: Profile, summary: InitSummary) -> None:
    """train/ and dev/ from public seeds, as the approved version synthetic/v1."""
    if not (home.datasets / DATASET / "v1" / "version.json").is_file():
        staging = home.datasets / f".init-{os.getpid()}"
        train = generate(profile.n_train, profile.image_size, TRAIN_SEED).write(staging / "train")
        dev = generate(profile.n_dev, profile.image_size, DEV_SEED).write(staging / "dev")
        create_version(home.root, DATASET, {"train": train, "dev": dev}, approve_it=True)
        for split in (train, dev):
            for item in split.iterdir():
                item.unlink()
            split.rmdir()
        staging.rmdir()
    version = resolve(home.root, f"{DATASET}/v1")
    summary["datasets"] = [
        {"ref": version.ref, "approved": version.approved, "content_hash": version.content_hash}
    ]


def _tiers(home: Home, profile: Profile, summary: InitSummary) -> None:
    """The held-back tiers, each from its own secret seed (synthetic.tiers)."""
    for tier in TIERS:
        if not versions(home.vault, tier):
            build_tier(home.vault, tier, profile.tiers[tier], profile.image_size)
    summary["tiers"] = tier_table(home)


def tier_table(home: Home) -> list[TierRow]:
    """Name, version, count, image size and defect count of each tier (no seeds, no labels)."""
    rows: list[TierRow] = []
    for tier in TIERS:
        manifest = json.loads((tier_path(home.vault, tier) / "manifest.json").read_text())
        rows.append(
            {
                "tier": tier,
                "version": current_version(home.vault, tier),
                "count": manifest["count"],
                "size": manifest["shape"][0],
                "n_defects": manifest["n_defects"],
            }
        )
    return rows


def _marker(home: Home, profile: Profile, summary: InitSummary) -> None:
    data = {"profile": profile.name, "created": time.time(), "layout_version": LAYOUT_VERSION}
    write_atomic(home.marker, json.dumps(data, indent=2, sort_keys=True) + "\n")


STEPS: list[Step] = [_layout, _open_dataset, _tiers]  # other areas append steps here


def _gate(home: Home, profile: Profile, summary: InitSummary) -> None:
    """The gate: pinned copy, ledger, baseline as best, reference candidate, users (as root)."""
    summary["gate"] = gate_init_step(home, profile, reference_config(profile.name)).model_dump(mode="json")


def reference_config(profile: str) -> Path | None:
    """The training config a run of ``profile`` patches on this machine (``policies/run.yaml``):
    the gate's reference candidate is its model. None for a profile the run policy lacks."""
    try:
        defaults = load_run_defaults(profile)
    except UsageError:
        return None
    return SOURCE_ROOT / defaults.base_config


STEPS.append(_gate)
FINAL_STEP: Step = _marker


def initialise(home: Home, profile: str = "default") -> InitSummary:
    """Create (or report) the home; returns the summary printed by ``segfactory init``."""
    if home.exists():
        info = home.info()
        return {
            "home": str(home.root),
            "existing": True,
            "profile": info.get("profile"),
            "created": info.get("created"),
            "tiers": tier_table(home),
            "datasets": _datasets(home.root),
        }
    chosen = get_profile(profile)
    summary: InitSummary = {"home": str(home.root), "existing": False, "profile": chosen.name}
    for step in [*STEPS, FINAL_STEP]:
        step(home, chosen, summary)
    summary["created"] = home.info()["created"]
    return summary


def _datasets(root: Path) -> list[DatasetRow]:
    return [{"ref": v.ref, "approved": True, "content_hash": v.content_hash} for v in approved(root)]
