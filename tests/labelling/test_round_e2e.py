"""One full labelling round on the demo profile, end to end: `init`, `data import --unlabelled`,
`label propose`, the review driven through the console in headless Chromium (Debian's, via
Playwright), `label finetune` (the real bwrap sandbox, the real gate), and the next pass by the
finetuned model. The scripted reviewer knows the generator's masks: it keeps an image whose
proposals are all voids and miss none, fixes one with the brush and the eraser, and drops one too
messy to fix. The round's figures go to test-artifacts/labelling/round.json (docs/labelling.md)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from segfactory.home import Home
from synthetic.splits import read_split
from synthetic.versions import resolve
from tests._loopback import serving
from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "labelling"
REVIEWED = 6  # images the scripted person reviews
MESSY = 6  # more wrong proposals than this on one image: the person drops it
pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.bwrap,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def _ok(res: Any) -> dict[str, Any]:
    assert res.returncode == 0, res.stderr[-2000:]
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def _unlabelled(
    cli: Callable[..., Any], home: Path, tmp: Path, name: str, n: int, seed: int
) -> tuple[Path, Path]:
    """(an unlabelled split imported as a person would, the generator's split with its true masks)."""
    h = ("--home", str(home), "--json")
    _ok(
        cli(
            "data",
            "generate",
            "--out",
            str(tmp / f"{name}-gen"),
            "--n",
            str(n),
            "--size",
            "64",
            "--seed",
            str(seed),
            "--workers",
            "1",
            *h,
        )
    )
    _ok(cli("data", "export", str(tmp / f"{name}-gen"), "--png", "--out", str(tmp / f"{name}-png"), *h))
    shutil.rmtree(tmp / f"{name}-png" / "masks")
    _ok(cli("data", "import", str(tmp / f"{name}-png"), "--out", str(tmp / name), "--unlabelled", *h))
    return tmp / name, tmp / f"{name}-gen"


@pytest.fixture
def console_url() -> Iterator[Callable[[Home], str]]:
    """Serve the console of a home on loopback; token ``round-token``."""
    from contextlib import ExitStack

    from audit import AuditLog
    from console import Auth, create_app

    with ExitStack() as stack:

        def start(home: Home) -> str:
            log = stack.enter_context(AuditLog(home, None))
            app = create_app(
                home, log, auth=Auth("round-token"), anchor=lambda: (None, False), person="human:reviewer"
            )
            return stack.enter_context(serving(app))

        yield start


def _plan(
    proposed: np.ndarray, truth: np.ndarray
) -> tuple[str, list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """The scripted person's decision: (action, (y, x, brush size) to paint, (y, x, size) to erase).

    A fix paints every true void over its centre at about its radius and erases every proposal
    that touches no void."""
    eight = np.ones((3, 3))
    labels, n = ndimage.label(proposed, structure=eight)
    wrong = [k for k in range(1, n + 1) if not truth[labels == k].any()]
    tl, tn = ndimage.label(truth, structure=eight)
    missed = [k for k in range(1, tn + 1) if not proposed[tl == k].any()]
    if len(wrong) > MESSY:
        action = "drop"
    elif not wrong and not missed:
        return "keep", [], []
    else:
        action = "fix"
    paint = [(*_centre(tl == k), 2 + int(np.sqrt((tl == k).sum() / np.pi))) for k in range(1, tn + 1)]
    erase = [(*_centre(labels == k), 4) for k in wrong]
    return action, paint, erase


def _centre(region: np.ndarray) -> tuple[int, int]:
    y, x = ndimage.center_of_mass(region)
    return round(y), round(x)


def _click(page: Any, points: list[tuple[int, int, int]]) -> None:
    box = page.locator("#canvas").bounding_box()
    for y, x, size in points:
        page.locator("#size").fill(str(size))
        page.mouse.click(box["x"] + (x + 0.5) / 64 * box["width"], box["y"] + (y + 0.5) / 64 * box["height"])


def _review(page: Any, base: str, ref: str, proposed: np.ndarray, truth: np.ndarray) -> dict[str, int]:
    from playwright.sync_api import expect

    page.goto(f"{base}/login?token=round-token")
    page.goto(f"{base}/labels/{ref}")
    page.locator("#queue a").first.click()
    done: dict[str, int] = {"keep": 0, "fix": 0, "drop": 0}
    for _ in range(REVIEWED):
        expect(page.locator("#editor")).to_have_attribute("data-ready", "1")
        image_id = int(page.url.rstrip("/").rsplit("/", 1)[-1])
        action, brush, erase = _plan(proposed[image_id], truth[image_id])
        if action == "drop" and done["drop"]:
            action = "fix"  # one drop shows it; the person tidies the other messy images by hand
        if action == "fix":
            page.check("#tool-eraser")
            _click(page, erase)
            page.check("#tool-brush")
            _click(page, brush)
            if not done["fix"]:
                page.screenshot(path=str(ARTIFACTS / "round-editor.png"), full_page=True)
        page.click(f"#{action}")
        done[action] += 1
        expect(page).not_to_have_url(f"{base}/labels/{ref}/train/{image_id}")
    page.goto(f"{base}/labels/{ref}")
    expect(page.locator("#stats")).to_contain_text(f"reviewed {REVIEWED}")
    page.screenshot(path=str(ARTIFACTS / "round-queue.png"), full_page=True)
    return done


def _truth_precision(queue_file: Path, truth: np.ndarray) -> float:
    """Share of a pass's proposed masks that touch a true void (host-side, for the figures)."""
    from agents.labelling import ReviewQueue, decode_mask

    queue = ReviewQueue.model_validate_json(queue_file.read_text())
    right = sum(bool(truth[i.image_index][decode_mask(i, truth.shape[1:])].any()) for i in queue.items)
    return right / len(queue.items) if queue.items else 0.0


def test_one_labelling_round_end_to_end(
    tmp_path: Path, cli: Callable[..., Any], console_url: Callable[[Home], str]
) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    root = tmp_path / "home"
    h = ("--home", str(root), "--json")
    _ok(cli("init", "--profile", "demo", *h))
    first, first_truth = _unlabelled(cli, root, tmp_path, "batch1", 24, 9101)
    opened = _ok(cli("label", "propose", "--data", str(first), *h))
    assert opened["round"] == "labels/v1" and opened["base"] == "synthetic/v1"
    home = Home(root)
    proposed = read_split(resolve(root, "labels/v1").train).masks
    truth = read_split(first_truth).masks

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
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.set_default_timeout(20_000)
        done = _review(page, console_url(home), "labels/v1", proposed, truth)
        browser.close()
    assert done["keep"] + done["fix"] >= 1

    record = _ok(cli("label", "finetune", "--backend", "bwrap", *h))  # the demo ticket: 4 epochs
    assert record["status"] == "DONE", record["reason"]
    assert record["reviewed"] == REVIEWED and record["kept"] + record["fixed"] + record["dropped"] == REVIEWED
    assert 0 <= record["precision"] <= 1 and record["human_minutes_per_image"] > 0
    assert record["gate_verdict"] in ("WIN", "NO_WIN") and record["dev_gain"] is not None
    reviewed = read_split(resolve(root, record["reviewed_version"]).train)
    assert len(reviewed) == 768 + done["keep"] + done["fix"]

    second, second_truth = _unlabelled(cli, root, tmp_path, "batch2", 12, 9102)
    next_pass = _ok(cli("label", "propose", "--data", str(second), *h))
    assert next_pass["model"] == record["model"] and next_pass["round"] == "labels/v3"
    report = _ok(cli("label", "report", *h))
    assert [r["round"] for r in report["rounds"]] == ["labels/v1"]
    assert "| labels/v1 | 6 |" in (home.people_dir("labels") / "report.md").read_text()
    figures = {
        "round": record,
        "decisions": done,
        "wall_seconds": round(time.monotonic() - started, 1),
        "pass1_truth_precision": round(_truth_precision(Path(opened["queue"]), truth), 4),
        "pass2_truth_precision": round(
            _truth_precision(Path(next_pass["queue"]), read_split(second_truth).masks), 4
        ),
        "pass1_items": opened["n_items"],
        "pass2_items": next_pass["n_items"],
    }
    (ARTIFACTS / "round.json").write_text(json.dumps(figures, indent=1, sort_keys=True))
