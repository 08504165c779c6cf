"""The gate's pinned copy: the code that scores, frozen into the vault at init.

``pin_code(vault)`` copies ``gate/``, ``vision/``, ``analysis/``, ``synthetic/`` and
``segfactory/{__init__,records,errors,gpus,stats,files,privilege,handover}.py`` into
``vault/gate-pinned/<sha256>/`` with a ``MANIFEST.json`` of file hashes; the directory name is
the sha256 of the manifest. The copy is made read-only (files 0444, directories 0555; as root,
``gate.users.lock_vault`` also gives it to root, so the gate's own user cannot make it writable
again).

The service runs from that copy (``python -I -B``: no bytecode is ever written into it, so it
stays byte-identical to what was pinned) and calls ``verify`` at start, before each verdict and
before each milestone: the copy must be the one whose digest the ledger recorded at init; every
manifest file must still hash the same; no other file may appear, ``__pycache__`` and its
bytecode included (Python would run a planted ``.pyc`` whose source is unchanged); nothing may
be writable; and every loaded module of these packages must have its ``__file__`` inside the
copy. Any mismatch raises ``PinError`` and service is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

from segfactory.files import staged_dir
from segfactory.privilege import chown_tree
from segfactory.records import canonical_json, sha256_file

# Its own root, not segfactory.home.SOURCE_ROOT: the service runs from the pinned copy, which
# holds only the gate and the modules it scores with.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
PINNED_PACKAGES = ("gate", "vision", "analysis", "synthetic")
PINNED_FILES = (
    "segfactory/__init__.py",
    "segfactory/records.py",
    "segfactory/errors.py",
    "segfactory/gpus.py",
    "segfactory/stats.py",
    "segfactory/files.py",
    "segfactory/privilege.py",
    "segfactory/handover.py",
)
MANIFEST = "MANIFEST.json"
CURRENT = "CURRENT"  # vault/gate-pinned/CURRENT names the digest the service runs from
PINNED_DIR = "gate-pinned"
META_PINNED = "pinned_code_sha256"
DIGEST = re.compile(r"[0-9a-f]{64}")  # what CURRENT may hold: a copy's name, never a path
FILE_MODE, DIR_MODE = 0o444, 0o555  # the pinned copy: readable, never writable


class PinError(Exception):
    """The pinned copy does not match its manifest, or code was loaded from elsewhere."""


def _source_files(root: Path) -> list[str]:
    files = [
        str(p.relative_to(root))
        for pkg in PINNED_PACKAGES
        for p in sorted((root / pkg).rglob("*.py"))
        if "__pycache__" not in p.parts
    ]
    return sorted(files + [f for f in PINNED_FILES if (root / f).is_file()])


def manifest_of(root: Path, files: list[str]) -> dict[str, str]:
    return {name: sha256_file(root / name) for name in files}


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
    """The pinned directory named by ``CURRENT``, or None when nothing was pinned.

    ``CURRENT`` holds a digest, never a path: anything else (an absolute path, ``..``, a name
    that is not 64 hex digits) is a PinError, so the copy that is run always lies directly in
    ``vault/gate-pinned/``. The named entry must be a directory, not a link."""
    marker = Path(vault) / PINNED_DIR / CURRENT
    if not marker.is_file():
        return None
    digest = marker.read_text().strip()
    if not DIGEST.fullmatch(digest):
        raise PinError(f"{marker} must hold the sha256 digest of a pinned copy, not {digest[:80]!r}")
    pinned = marker.parent / digest
    if pinned.is_symlink() or not pinned.is_dir():
        raise PinError(f"the pinned copy {pinned} named by {marker} is a link or not a directory")
    return pinned


def _copy(source: Path, manifest: dict[str, str], target: Path) -> None:
    with staged_dir(target, mode=0o755) as staging:
        for name in manifest:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, staging / name)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    make_read_only(target)


def make_read_only(pinned: Path) -> None:
    """Files 0444, directories 0555, owners unchanged; a link is neither followed nor changed."""
    chown_tree(pinned, -1, -1, dir_mode=DIR_MODE, file_mode=FILE_MODE)


def _unexpected_entries(pinned: Path, manifest: dict[str, str]) -> list[str]:
    """Anything in the copy that pinning did not put there (bytecode caches included), or writable."""
    found = []
    for path in sorted(pinned.rglob("*")):
        name = str(path.relative_to(pinned))
        if path.is_symlink() or (path.is_dir() and path.name == "__pycache__"):
            found.append(name)
        elif path.is_file() and name != MANIFEST and name not in manifest:
            found.append(name)
        elif path.lstat().st_mode & 0o222:
            found.append(f"{name} (writable)")
    return found


def verify_files(pinned: Path, expected_digest: str | None = None) -> str:
    """Re-hash the copy against its manifest (and the ledger's digest); returns the digest or raises
    PinError."""
    if expected_digest is not None and pinned.name != expected_digest:
        raise PinError(
            f"the served copy {pinned} is not the one pinned in the ledger ({expected_digest[:12]}…)"
        )
    try:
        manifest: dict[str, str] = json.loads((pinned / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise PinError(f"pinned copy {pinned} has no readable manifest: {exc}") from None
    digest = manifest_digest(manifest)
    if digest != pinned.name:
        raise PinError(f"manifest of {pinned} hashes to {digest[:12]}…, not its directory name")
    extra = _unexpected_entries(pinned, manifest)
    if extra:
        raise PinError(f"unlisted, cached or writable entries in the pinned copy: {extra[:5]}")
    for name, expected in manifest.items():
        path = pinned / name
        if not path.is_file() or sha256_file(path) != expected:
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


def verify(pinned: Path, expected_digest: str | None = None) -> str:
    """Both checks (the copy must be ``expected_digest``, the ledger's, when given); returns the digest."""
    digest = verify_files(pinned, expected_digest)
    verify_loaded_modules(pinned)
    return digest
