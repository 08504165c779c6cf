"""The blind-test page in real headless Chromium (Debian's, driven by Playwright): a person starts
a session, is shown unlabelled crops one at a time, picks, and reads the accuracy. Screenshot to
test-artifacts/console/blind.png (and docs/screenshots/ when SEGFACTORY_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis.realism.standin import write_stand_in
from audit import AuditLog, MemoryAnchorStore
from segfactory.home import Home
from synthetic import generate
from synthetic.exchange import import_real
from tests.conftest import REPO
from tests.console.test_browser import ARTIFACTS, CHROMIUM, page, server  # noqa: F401  (fixtures over our app)

TRIALS = 6
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    write_stand_in(tmp_path / "src", 40, 32, 9001)
    import_real(tmp_path / "src", tmp_path / "real")
    generate(20, 32, 1, workers=1).write(tmp_path / "syn")
    home = Home.resolve(tmp_path / "home")
    home.root.mkdir(parents=True)
    return home


@pytest.fixture
def app(home: Home) -> Iterator[Any]:
    from console import Auth, create_app

    with AuditLog(home, MemoryAnchorStore()) as log:
        yield create_app(home, log, auth=Auth("test-token"), person="human:tester")


def test_a_person_plays_the_blind_test_in_a_browser(page: Any, home: Home) -> None:  # noqa: F811
    from playwright.sync_api import expect

    from analysis.realism import blind

    tab, tmp = page, home.root.parent
    tab.click("#nav-blind")
    tab.fill("#synthetic", str(tmp / "syn"))
    tab.fill("#real", str(tmp / "real"))
    tab.fill("#n", str(TRIALS))
    tab.click("#start")
    sid = tab.url.rsplit("/", 1)[1]
    shown: dict[str, str] = {}
    truth = [t.source for t in blind.load(home.people_dir("blind"), sid).trials]
    for k, source in enumerate(truth):
        expect(tab.locator("#progress")).to_have_text(f"crop {k + 1} of {TRIALS}")
        loaded = tab.locator("#crop").evaluate("img => img.complete && img.naturalWidth")
        assert loaded == 32  # the crop PNG arrived (32 px, shown at 256)
        if k:  # after the first answer every trial's page reads the same but for its numbers
            shown.setdefault(source, re.sub(r"\d+", "#", tab.locator("main").inner_html()))
        if k == 0:
            _shot(tab)
        tab.click("#guess-real" if k % 2 else "#guess-synthetic")
    assert shown["real"] == shown["synthetic"]  # nothing on the page tells a real crop from a synthetic one
    expect(tab.locator("#done")).to_contain_text(f"All {TRIALS} crops answered")
    correct = sum((k % 2 == 1) == (s == "real") for k, s in enumerate(truth))
    expect(tab.locator("#result")).to_contain_text(f"accuracy {correct / TRIALS:.2f}")
    tab.click("#back")
    expect(tab.locator("#sessions")).to_contain_text(sid)
    log = (home.root / "audit" / "log.jsonl").read_text()
    assert log.count("blind_guess") == TRIALS and "blind_session_started" in log


def _shot(tab: Any) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / "blind.png"), full_page=True)
    if os.environ.get("SEGFACTORY_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(ARTIFACTS / "blind.png", REPO / "docs" / "screenshots" / "blind.png")
