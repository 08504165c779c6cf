"""Headless Chromium for the browser tests: Debian's build driven by Playwright, a fresh profile.

Screenshots go to ``test-artifacts/<area>/`` and, with ``SEGFACTORY_UPDATE_SCREENSHOTS=1``, to
``docs/screenshots/`` as well.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
DOCS_SHOTS = REPO / "docs" / "screenshots"


@contextmanager
def chromium(profile: Path, width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A browser context on a fresh user-data-dir ``profile`` (a Playwright ``BrowserContext``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=list(ARGS),
            viewport={"width": width, "height": height},
        )
        try:
            yield context
        finally:
            context.close()


def screenshot(tab: Any, area: str, name: str, *, full_page: bool = True, docs: bool = True) -> Path:
    """Save a PNG of ``tab`` under test-artifacts/``area``/; ``docs``: also under docs/screenshots/
    when ``SEGFACTORY_UPDATE_SCREENSHOTS=1``."""
    folder = REPO / "test-artifacts" / area
    folder.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(folder / name), full_page=full_page)
    if docs and os.environ.get("SEGFACTORY_UPDATE_SCREENSHOTS") == "1":
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / name, DOCS_SHOTS / name)
    return folder / name


__all__ = ["ARGS", "CHROMIUM", "chromium", "screenshot"]
