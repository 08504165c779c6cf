"""Label review through the HTTP API: keep, fix, drop, apply as a new version; stale edits refused."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np

from synthetic.splits import read_split
from synthetic.versions import resolve
from tests.console.conftest import SIZE, ConsoleHome, csrf_of

BASE = "/labels/synthetic/v1"


def _png(mask: np.ndarray) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray((mask * 255).astype(np.uint8), mode="L").save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def _decide(
    client: Any, image_id: int, action: str, *, rev: int = 0, mask: str = "", base: str = BASE
) -> Any:
    csrf = csrf_of(client.get(f"{base}/train/{image_id}").text)
    return client.post(
        f"{base}/train/{image_id}/decide",
        follow_redirects=False,
        data={"csrf": csrf, "action": action, "rev": str(rev), "seconds": "30", "mask": mask},
    )


def test_queue_lists_the_suspects_with_images(client: Any) -> None:
    page = client.get(BASE).text
    assert [f"item-train-{i}" in page for i in (3, 1, 5)] == [True] * 3
    image = client.get(f"{BASE}/train/3/image.png")
    mask = client.get(f"{BASE}/train/3/mask.png")
    assert image.headers["content-type"] == mask.headers["content-type"] == "image/png"


def test_keep_fix_drop_then_apply_makes_a_new_version(client: Any, console_home: ConsoleHome) -> None:
    fixed = np.zeros((SIZE, SIZE), np.uint8)
    fixed[2:9, 2:9] = 1
    assert _decide(client, 3, "fix", mask=_png(fixed)).status_code == 303
    assert _decide(client, 1, "drop").status_code == 303
    assert _decide(client, 5, "keep").status_code == 303
    page = client.post(f"{BASE}/apply", data={"csrf": csrf_of(client.get(BASE).text)})
    assert "Created <b>synthetic/v2</b>" in page.text
    root = console_home.home.root
    old, new = (
        read_split(resolve(root, "synthetic/v1").train),
        read_split(resolve(root, "synthetic/v2").train),
    )
    assert len(old) == 8 and len(new) == 7  # image 1 dropped; v1 kept as it was
    assert np.array_equal(new.masks[2], fixed)  # image 3 is index 2 once image 1 is gone
    assert [m["id"] for m in new.image_meta][:3] == ["img000", "img002", "img003"]
    assert resolve(root, "synthetic/v2").parent == resolve(root, "synthetic/v1").content_hash
    stats = client.get("/labels").text
    assert "synthetic/v1" in stats
    lines = [json.loads(x) for x in (console_home.home.audit / "log.jsonl").read_text().splitlines()]
    decisions = [r for r in lines if r["event"] == "label_decision"]
    assert {r["payload"]["action"] for r in decisions} == {"keep", "fix", "drop"}
    assert all(r["actor"] == "human" for r in decisions)
    applied = [r for r in lines if r["event"] == "label_review_applied"][0]["payload"]
    assert applied["confirmed_errors"] == 2 and applied["human_minutes_per_image"] == 0.5
    from console import review_stats

    expected = {k: v for k, v in applied.items() if k not in ("by", "new_version", "parent")}
    assert review_stats(console_home.home) == [expected]


def test_fixed_split_passes_the_data_check(client: Any, console_home: ConsoleHome) -> None:
    from synthetic.check import check_split

    fixed = np.zeros((SIZE, SIZE), np.uint8)
    fixed[10:14, 1:3] = 1
    fixed[0:2, 20:24] = 1
    _decide(client, 3, "fix", mask=_png(fixed))
    client.post(f"{BASE}/apply", data={"csrf": csrf_of(client.get(BASE).text)})
    report = check_split(resolve(console_home.home.root, "synthetic/v2").train)
    assert report.ok, report.problems


def test_a_conflicting_edit_is_refused(client: Any) -> None:
    assert _decide(client, 3, "keep").status_code == 303
    stale = _decide(client, 3, "drop", rev=0)  # opened before the keep was saved
    assert stale.status_code == 409 and "decided by someone else" in stale.text
    assert _decide(client, 3, "drop", rev=1).status_code == 303


def test_an_edit_against_a_superseded_version_is_refused(client: Any) -> None:
    _decide(client, 1, "drop")
    client.post(f"{BASE}/apply", data={"csrf": csrf_of(client.get(BASE).text)})
    stale = _decide(client, 5, "drop")
    assert stale.status_code == 409 and "synthetic/v2 is" in stale.text


def test_a_mask_of_the_wrong_size_is_refused(client: Any) -> None:
    reply = _decide(client, 3, "fix", mask=_png(np.zeros((SIZE + 1, SIZE), np.uint8)))
    assert reply.status_code == 400 and "the mask is" in reply.text
    assert _decide(client, 3, "fix", mask="not a data url").status_code == 400


def test_dataset_names_with_path_tricks_are_refused(client: Any) -> None:
    for path in ("/labels/../v1", "/labels/..%2Fx/v1", "/labels/.hidden/v1", "/labels/synthetic/latest"):
        assert client.get(path).status_code in (400, 404), path
    assert "not a dataset version" in client.get("/labels/.hidden/v1").text
