"""Where the held-back tiers live in the vault, and how the gate reads them.

Layout (shared with ``synthetic.tiers``): ``vault/tiers/<tier>/v<k>/`` is a split folder, and
``vault/tiers/<tier>/CURRENT`` names the current version. The gate reads them; building and
rotating a tier (secret seeds from ``os.urandom``) belongs to ``synthetic.tiers``.
"""

from __future__ import annotations

from pathlib import Path

from segfactory.errors import DataError
from synthetic.splits import Split, read_split

TIERS_DIR = "tiers"
CURRENT_FILE = "CURRENT"


def tiers_root(vault: Path) -> Path:
    return Path(vault) / TIERS_DIR


def current_version(vault: Path, tier: str) -> int | None:
    """The current version number of ``tier``, or None when the tier was never built."""
    marker = tiers_root(vault) / tier / CURRENT_FILE
    if not marker.is_file():
        return None
    text = marker.read_text().strip().lstrip("v")
    if not text.isdigit():
        raise DataError(f"{marker} holds {text!r}; expected a version number like 3 or v3")
    return int(text)


def tier_dir(vault: Path, tier: str, version: int) -> Path:
    return tiers_root(vault) / tier / f"v{version}"


def read_tier(vault: Path, tier: str, version: int | None = None) -> tuple[int, Split]:
    """(version, split) of ``tier`` (the current version unless one is named)."""
    version = current_version(vault, tier) if version is None else version
    if version is None:
        raise DataError(f"tier {tier} has no version in {tiers_root(vault)}; build it with `segfactory init`")
    return version, read_split(tier_dir(vault, tier, version))


def built_tiers(vault: Path) -> dict[str, int]:
    """Every tier with a current version."""
    root = tiers_root(vault)
    found: dict[str, int] = {}
    if root.is_dir():
        for child in sorted(root.iterdir()):
            version = current_version(vault, child.name)
            if version is not None:
                found[child.name] = version
    return found
