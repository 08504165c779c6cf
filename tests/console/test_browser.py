"""End to end in real headless Chromium (Debian's, driven by Playwright): chat approval, label
fixes and drops, audit filtering. Screenshots go to test-artifacts/console/ (and to
docs/screenshots/ when SEGFACTORY_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synthetic.splits import read_split
from synthetic.versions import resolve
from tests.conftest import REPO
from tests.console.conftest import REQUEST, RUN, ConsoleHome, seed_run

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "console"
DOCS_SHOTS = REPO / "docs" / "screenshots"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def server(app: Any) -> Iterator[str]:
    import uvicorn

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the console did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def page(server: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
            ],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        tab.dialogs = []
        tab.on("dialog", lambda d: (tab.dialogs.append(d.message), d.dismiss()))
        tab.goto(f"{server}/login?token=test-token")
        tab.base = server
        yield tab
        browser.close()


def _shot(tab: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / name), full_page=True)
    if os.environ.get("SEGFACTORY_UPDATE_SCREENSHOTS") == "1":
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACTS / name, DOCS_SHOTS / name)


def test_approve_a_data_request_through_the_chat(page: Any, console_home: ConsoleHome) -> None:
    from playwright.sync_api import expect

    expect(page.locator("h1")).to_have_text("Runs")
    _shot(page, "runs.png")
    page.click("#nav-approvals")
    page.click(f"text={REQUEST}")
    page.fill("#reply", "approve 200, thin voids only")
    page.click("#send")
    expect(page.locator(".from-console").last).to_contain_text("I read this as: APPROVE, for 200 images")
    page.click("#confirm")
    expect(page.locator(".from-console").last).to_contain_text("Data ticket r1-dr1-data is queued for run r1")
    expect(page.locator("#req-status")).to_have_text("approved")
    expect(page.locator("#approved-tickets")).to_contain_text("r1-dr1-data")
    _shot(page, "approvals-chat.png")
    _plot(console_home.home.people_dir(RUN) / "verdicts.png")
    page.goto(f"{page.base}/runs/{RUN}")
    expect(page.locator("#approved-tickets")).to_contain_text("r1-dr1-data")
    expect(page.locator(".plots img")).to_have_count(1)
    expect(page.locator("#verdicts")).to_contain_text("NO_WIN")
    _shot(page, "run.png")
    seed_run(
        console_home.home, RUN, {"tickets_run": 2, "device_seconds": 99.0, "taken_approvals": ["r1-dr1-data"]}
    )
    expect(page.locator("#tickets-run")).to_have_text("2", timeout=10_000)  # the page polls /api/runs/<id>
    expect(page.locator("#approved-tickets")).to_contain_text("taken into the run's queue")


def _plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(4, 2.5), dpi=80)
    ax.bar(["WIN", "NO_WIN", "DEV_LOSS"], [0, 1, 3])
    ax.set_title("verdicts")
    fig.savefig(path)
    plt.close(fig)


def _draw(page: Any, points: list[tuple[float, float]]) -> None:
    box = page.locator("#canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * points[0][0], box["y"] + box["height"] * points[0][1])
    page.mouse.down()
    for x, y in points[1:]:
        page.mouse.move(box["x"] + box["width"] * x, box["y"] + box["height"] * y, steps=8)
    page.mouse.up()


def test_fix_and_drop_labels(page: Any, console_home: ConsoleHome) -> None:
    from playwright.sync_api import expect

    page.goto(f"{page.base}/labels/synthetic/v1")
    _shot(page, "label-queue.png")
    page.click("#item-train-3")
    expect(page.locator("#editor")).to_have_attribute("data-ready", "1")
    _draw(page, [(0.1, 0.8), (0.5, 0.8), (0.5, 0.9)])  # brush: a new void stroke
    page.check("#tool-eraser")
    _draw(page, [(0.3, 0.25), (0.35, 0.3)])  # eraser over part of the old void
    _shot(page, "label-editor.png")
    page.click("#fix")
    expect(page).to_have_url(f"{page.base}/labels/synthetic/v1/train/1")  # on to the next suspect
    page.click("#drop")
    page.goto(f"{page.base}/labels/synthetic/v1")
    expect(page.locator("#stats")).to_contain_text("fixed 1 · dropped 1")
    page.click("#apply")
    expect(page.locator("#applied")).to_contain_text("synthetic/v2")
    root = console_home.home.root
    old, new = (
        read_split(resolve(root, "synthetic/v1").train),
        read_split(resolve(root, "synthetic/v2").train),
    )
    assert len(new) == len(old) - 1
    assert int(new.masks[2].sum()) > int(
        old.masks[3].sum()
    )  # image 3 (index 2 after the drop) gained the stroke
    assert np.array_equal(new.masks[0], old.masks[0])


def test_filter_the_audit_log_and_see_a_protected_read(page: Any) -> None:
    from playwright.sync_api import expect

    page.click("#nav-audit")
    expect(page.locator("#chain-banner")).to_contain_text("Chain: intact")
    page.select_option("#f-actor", "sandbox")
    page.click("#f-apply")
    rows = page.locator("tr.rec")
    expect(rows).to_have_count(1)
    expect(page.locator("tr.protected")).to_contain_text("protected read: /vault/confirm-a/labels.npy")
    color = page.locator("tr.protected td").first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert color == "rgb(255, 225, 225)"
    _shot(page, "audit.png")
    page.select_option("#f-actor", "proposer")
    page.click("#f-apply")
    page.click("text=view blob:")
    expect(page.locator("#blob")).to_contain_text("<script>alert('x')</script>")  # shown as text
    expect(page.locator("#blob")).to_contain_text("\\x1b[31mRED")
    assert page.locator("#blob script").count() == 0 and page.dialogs == []
    _shot(page, "audit-blob.png")
