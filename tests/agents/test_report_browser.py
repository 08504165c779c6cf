"""report.html in real headless Chromium: the outcome comes first, no Markdown shows through, no
table is wider than the page, the plots load, and a hostile hypothesis stays text.

The report is written by ``agents.report.write`` from the demo-like record of ``_report_fixture``;
``SEGFACTORY_REPORT_HTML=<path>`` runs the same checks on a report a real run wrote (for the docs'
screenshot: add ``SEGFACTORY_UPDATE_SCREENSHOTS=1``). Screenshots go to test-artifacts/report/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import report as rpt
from tests._chromium import CHROMIUM, chromium, screenshot
from tests.agents import _report_fixture as fx

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]
WIDTHS = (1280, 1024)  # a laptop and a narrow window
REAL_REPORT = os.environ.get("SEGFACTORY_REPORT_HTML")


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if REAL_REPORT:
        return Path(REAL_REPORT)
    root = tmp_path_factory.mktemp("report")
    fx.curves(root / "tickets")
    return rpt.write(fx.demo_report(), root / "people", root / "tickets")["html"]


@pytest.fixture(scope="module", params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def tab(
    request: pytest.FixtureRequest, report_html: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("profile"), width=request.param) as context:
        page = context.new_page()
        page.requests = []
        page.dialogs = []
        page.on("request", lambda req: page.requests.append(req.url))
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.goto(report_html.as_uri())
        page.wait_for_load_state("load")
        page.width = request.param
        yield page


def test_the_outcome_is_the_first_section(tab: Any) -> None:
    first = tab.evaluate("document.querySelector('main section').id")
    assert first == "outcome"
    assert tab.evaluate("document.querySelector('main h2').textContent") == "Outcome"
    tops = tab.evaluate(
        "[...document.querySelectorAll('main section')].map(s => s.getBoundingClientRect().top)"
    )
    assert tops[0] == min(tops)
    outcome = tab.inner_text("#outcome")
    assert "The best after this run is" in outcome or "The best has no sealed score" in outcome
    assert tab.evaluate("!!document.querySelector('#outcome img')") or "No ticket" in outcome


def test_no_markdown_shows_through(tab: Any) -> None:
    tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    visible = tab.inner_text("body")
    assert "`" not in visible
    assert "](plots/" not in visible and "|---" not in visible and "**The best" not in visible
    assert tab.evaluate("document.querySelectorAll('code').length") > 0


def test_no_table_is_wider_than_the_page(tab: Any) -> None:
    tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    scroll, client = tab.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client, f"the page scrolls sideways at {tab.width}px: {scroll} > {client}"
    boxes = tab.evaluate(
        "[...document.querySelectorAll('table')]"
        ".map(t => t.getBoundingClientRect()).map(b => [b.left, b.right])"
    )
    assert boxes, "the report has no table"
    for left, right in boxes:
        assert left >= 0 and right <= client, f"a table spans {left}..{right} of {client}px"


def test_the_plots_load_and_nothing_else_is_fetched(tab: Any) -> None:
    images = tab.evaluate("[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])")
    assert images and all(src.startswith("plots/") and width > 0 for src, width in images), images
    assert all(url.startswith("file://") for url in tab.requests), tab.requests


@pytest.mark.skipif(bool(REAL_REPORT), reason="the hostile hypothesis is the fixture's")
def test_a_hostile_hypothesis_stays_text(tab: Any) -> None:
    tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert tab.dialogs == []
    assert tab.evaluate("document.querySelectorAll('script').length") == 0
    assert tab.evaluate("[...document.querySelectorAll('a')].length") == 0
    assert " ".join(fx.HOSTILE.split()) in tab.inner_text("#tickets details")


def test_a_screenshot_of_the_report(tab: Any) -> None:
    """The first screen for the docs (at the laptop width), and the whole page for people to look at."""
    name = f"report-{tab.width}"
    tab.evaluate("window.scrollTo(0, 0)")
    first = tab.width == WIDTHS[0]
    shot = screenshot(tab, "report", "report.png" if first else f"{name}.png", full_page=False, docs=first)
    assert shot.stat().st_size > 10_000
    screenshot(tab, "report", f"{name}-full.png", docs=False)
