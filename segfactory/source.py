"""What code a result came from: one digest of the factory's own source files.

A comparison run a seed at a time (``compare --first-seed``) may have its seeds run on different
days, and so on different code. Each comparison records this digest, and ``compare --combine``
says when the seeds it combines ran on different code. The digest covers every first-party
package's ``.py`` files and the policies, configs and prompts they read, by path and content;
caches and anything else are left out, so a rebuilt venv or a run's outputs do not change it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from segfactory.home import SOURCE_ROOT

PACKAGES = (
    "agents",
    "analysis",
    "audit",
    "cli",
    "console",
    "controls",
    "gate",
    "runner",
    "sandbox",
    "segfactory",
    "synthetic",
    "vision",
)
DATA = ("policies", "configs", "prompts")
SUFFIXES = (".py", ".yaml", ".yml", ".json", ".md", ".toml")


def source_files(root: Path = SOURCE_ROOT) -> list[Path]:
    """The files the digest covers, sorted by their path beneath ``root``; no link is followed."""
    found = []
    for top in (*PACKAGES, *DATA):
        for path in (root / top).rglob("*"):
            if "__pycache__" in path.parts or path.is_symlink() or not path.is_file():
                continue
            if path.suffix in SUFFIXES:
                found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


@functools.cache
def source_digest(root: Path = SOURCE_ROOT) -> str:
    """``sha256:<hex>`` over each covered file's path and content digest, in path order."""
    total = hashlib.sha256()
    for path in source_files(root):
        total.update(path.relative_to(root).as_posix().encode() + b"\0")
        total.update(hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + total.hexdigest()
