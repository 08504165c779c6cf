"""Held-back tiers: split folders drawn from secret seeds, versioned, inside the vault.

Layout (trust rule 2)::

    vault/tiers/<tier>/v<k>/     a split folder plus secret.json (the seed, mode 0600)
    vault/tiers/<tier>/CURRENT   text "v<k>": the version that answers queries

The seed comes from ``os.urandom`` and is written only into ``secret.json`` inside the vault;
manifests say ``"seed": "secret"``. A version is built in a hidden sibling and renamed into
place, so a reader never sees a tier without its secret or a half-written split.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from segfactory.errors import DataError, HomeError, UsageError
from segfactory.files import write_atomic
from synthetic._generate import generate
from synthetic.params import GenParams

TIERS = ("confirm-a", "confirm-b", "sealed", "never-queried")
SECRET_BYTES = 16  # 128-bit seeds: the public generator's integer seeds never collide with them
_VERSION = re.compile(r"^v(\d+)$")


def _check_tier(tier: str) -> None:
    if tier not in TIERS and tier != "real-holdout":
        raise UsageError(f"unknown tier {tier!r}; known: {', '.join(TIERS)}, real-holdout")


def versions(vault_dir: Path, tier: str) -> list[str]:
    """Existing versions of a tier, oldest first."""
    folder = Path(vault_dir) / "tiers" / tier
    if not folder.is_dir():
        return []
    found = [
        (int(m.group(1)), p.name) for p in folder.iterdir() if (m := _VERSION.match(p.name)) and p.is_dir()
    ]
    return [name for _, name in sorted(found)]


def current_version(vault_dir: Path, tier: str) -> str:
    """The version named by ``CURRENT``; HomeError if the tier was never built."""
    _check_tier(tier)
    marker = Path(vault_dir) / "tiers" / tier / "CURRENT"
    if not marker.is_file():
        raise HomeError(f"tier {tier} has no CURRENT version under {vault_dir}; run `segfactory init`")
    return marker.read_text().strip()


def tier_path(vault_dir: Path, tier: str, version: str | None = None) -> Path:
    """The split folder of a tier version (default: CURRENT)."""
    _check_tier(tier)
    name = version or current_version(vault_dir, tier)
    path = Path(vault_dir) / "tiers" / tier / name
    if not path.is_dir():
        raise HomeError(f"tier {tier} version {name} does not exist under {vault_dir}")
    return path


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _set_current(folder: Path, version: str) -> None:
    write_atomic(folder / "CURRENT", version + "\n")


def build_tier(
    vault_dir: Path,
    tier: str,
    n: int,
    size: int,
    params: GenParams | None = None,
    version: str | None = None,
    *,
    workers: int | None = None,
) -> Path:
    """Draw a fresh secret seed, generate the tier version, make it CURRENT; return its path.

    ``version`` defaults to the next ``v<k>``; an existing version is never replaced (DataError).
    ``workers`` as in ``synthetic.generate`` (default: every core, by forking). Pass
    ``workers=1`` from a process that runs threads (a server): forking it can deadlock.
    Used by ``segfactory init`` and by ``gate rotate``.
    """
    _check_tier(tier)
    folder = Path(vault_dir) / "tiers" / tier
    folder.mkdir(parents=True, exist_ok=True)
    if version is None:
        existing = versions(vault_dir, tier)
        version = f"v{int(existing[-1][1:]) + 1 if existing else 1}"
    elif not _VERSION.match(version):
        raise UsageError(f"tier version must look like v1, v2, ...; got {version!r}")
    target = folder / version
    if target.exists():
        raise DataError(f"{target} already exists; tier versions are immutable, rotate to a new version")
    seed = int.from_bytes(os.urandom(SECRET_BYTES), "big")
    drawn = generate(n, size, seed, params, seed_label="secret", workers=workers)
    drawn.extra.update({"tier": tier, "version": version})
    staging = folder / f".{version}.building-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        drawn.write(staging)
        _write_private(
            staging / "secret.json",
            json.dumps(
                {"tier": tier, "version": version, "seed": seed, "created": time.time()}, sort_keys=True
            ),
        )
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _set_current(folder, version)
    return target


def read_secret_seed(vault_dir: Path, tier: str, version: str | None = None) -> int:
    """The secret seed of a tier version (for the gate's own audits; never print it)."""
    data = json.loads((tier_path(vault_dir, tier, version) / "secret.json").read_text())
    return int(data["seed"])
