"""The gate's pinned copy (issue 4, §3): the code that scores, frozen into the vault at init.

``pin_code(vault)`` copies ``gate/``, ``vision/``, ``analysis/``, ``synthetic/`` and
``segfactory/{__init__,records,errors}.py`` into ``vault/gate-pinned/<sha256>/`` with a
``MANIFEST.json`` of file hashes; the directory name is the sha256 of the manifest.
The service runs from that copy (``python -I``, the copy first on ``sys.path``) and calls
``verify`` at start and before each verdict: every manifest file must still hash the same, no
unlisted ``.py`` file may appear, and every loaded module of these packages must have its
``__file__`` inside the copy. Any mismatch raises ``PinError`` and service is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from segfactory.records import canonical_json

SOURCE_ROOT = Path(__file__).resolve().parent.parent
PINNED_PACKAGES = ("gate", "vision", "analysis", "synthetic")
PINNED_FILES = ("segfactory/__init__.py", "segfactory/records.py", "segfactory/errors.py")
MANIFEST = "MANIFEST.json"
CURRENT = "CURRENT"  # vault/gate-pinned/CURRENT names the digest the service runs from
PINNED_DIR = "gate-pinned"
META_PINNED = "pinned_code_sha256"


class PinError(Exception):
    """The pinned copy does not match its manifest, or code was loaded from elsewhere."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source_files(root: Path) -> list[str]:
    files = [str(p.relative_to(root)) for pkg in PINNED_PACKAGES for p in sorted((root / pkg).rglob("*.py"))
             if "__pycache__" not in p.parts]
    return sorted(files + [f for f in PINNED_FILES if (root / f).is_file()])


def manifest_of(root: Path, files: list[str]) -> dict[str, str]:
    return {name: _sha256(root / name) for name in files}


def manifest_digest(manifest: dict[str, str]) -> str:
    return hashlib.sha256(canonical_json(manifest)).hexdigest()


def pin_code(vault: Path, source: Path = SOURCE_ROOT) -> tuple[str, Path]:
    """Copy the scoring code into the vault; returns (digest, pinned directory). Idempotent."""
    manifest = manifest_of(source, _source_files(source))
    digest = manifest_digest(manifest)
    target = Path(vault) / PINNED_DIR / digest
    if not target.is_dir():
        _copy(source, manifest, target)
    (target.parent / CURRENT).write_text(digest + "\n")
    return digest, target


def current_pinned(vault: Path) -> Path | None:
    """The pinned directory named by ``CURRENT``, or None when nothing was pinned."""
    marker = Path(vault) / PINNED_DIR / CURRENT
    if not marker.is_file():
        return None
    return marker.parent / marker.read_text().strip()


def _copy(source: Path, manifest: dict[str, str], target: Path) -> None:
    digest = target.name
    staging = target.with_name(f".{digest}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    for name in manifest:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, staging / name)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.rename(staging, target)


def verify_files(pinned: Path) -> str:
    """Re-hash the copy against its manifest; returns the digest or raises PinError."""
    try:
        manifest: dict[str, str] = json.loads((pinned / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise PinError(f"pinned copy {pinned} has no readable manifest: {exc}") from None
    digest = manifest_digest(manifest)
    if digest != pinned.name:
        raise PinError(f"manifest of {pinned} hashes to {digest[:12]}…, not its directory name")
    present = {str(p.relative_to(pinned)) for p in pinned.rglob("*.py") if "__pycache__" not in p.parts}
    extra = sorted(present - set(manifest))
    if extra:
        raise PinError(f"unlisted files in the pinned copy: {extra[:5]}")
    for name, expected in manifest.items():
        path = pinned / name
        if not path.is_file() or _sha256(path) != expected:
            raise PinError(f"pinned file {name} changed: expected sha256 {expected[:12]}…")
    return digest


def verify_loaded_modules(pinned: Path) -> None:
    """Every loaded module of the pinned packages must come from the copy."""
    root = pinned.resolve()
    for name, module in list(sys.modules.items()):
        top = name.split(".")[0]
        if top not in (*PINNED_PACKAGES, "segfactory"):
            continue
        origin = getattr(module, "__file__", None)
        if origin is None:
            continue
        if not Path(origin).resolve().is_relative_to(root):
            raise PinError(f"module {name} was loaded from {origin}, outside the pinned copy {root}")


def verify(pinned: Path) -> str:
    """Both checks; returns the digest."""
    digest = verify_files(pinned)
    verify_loaded_modules(pinned)
    return digest
