"""The blind-test API mounted on the real console app: start, crop PNGs, guesses, result, audit."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analysis.realism.standin import write_stand_in
from audit import AuditLog, MemoryAnchorStore
from segfactory.home import Home
from synthetic import generate
from synthetic.exchange import import_real


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[Any, Path, Path, Home]]:
    from fastapi.testclient import TestClient

    from console import Auth, create_app

    write_stand_in(tmp_path / "src", 60, 32, 9001)
    import_real(tmp_path / "src", tmp_path / "real")
    generate(20, 32, 1, workers=1).write(tmp_path / "syn")
    home = Home.resolve(tmp_path / "home")
    home.root.mkdir(parents=True)
    with AuditLog(home, MemoryAnchorStore()) as log:
        app = create_app(home, log, auth=Auth("test-token"), person="human:tester")
        with TestClient(app, base_url="http://127.0.0.1") as c:
            c.headers["authorization"] = "Bearer test-token"
            yield c, tmp_path / "syn", tmp_path / "real" / "real-dev", home


def test_a_person_plays_a_blind_test_through_the_console(client: tuple[Any, Path, Path, Home]) -> None:
    from PIL import Image

    c, syn, real, home = client
    started = c.post("/api/blind", json={"synthetic": str(syn), "real": str(real), "n": 6})
    assert started.status_code == 200, started.text
    sid = started.json()["id"]
    png = c.get(f"/api/blind/{sid}/crop/0.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert np.asarray(Image.open(io.BytesIO(png.content))).shape == (32, 32)
    for k in range(6):
        assert c.post(f"/api/blind/{sid}/guess/{k}", json={"guess": "real"}).status_code == 200
    result = c.get(f"/api/blind/{sid}/result").json()
    assert result["answered"] == 6 and result["correct"] == 3  # half the trials are real
    assert c.post(f"/api/blind/{sid}/guess/0", json={"guess": "maybe"}).status_code >= 400
    log = (home.root / "audit" / "log.jsonl").read_text()
    assert log.count("blind_guess") == 6 and "blind_session_started" in log


def _trial_page(c: Any, sid: str) -> str:
    html = c.get(f"/blind/{sid}").text
    return re.sub(r"\d+", "#", html)  # the trial number and the running score differ; nothing else may


def test_the_blind_page_shows_no_label_and_scores_form_guesses(client: tuple[Any, Path, Path, Home]) -> None:
    from analysis.realism import blind

    c, syn, real, home = client
    del c.headers["authorization"]  # a browser session: the cookie, and a CSRF token on every form
    assert c.get("/login?token=test-token").status_code == 200
    form = c.get("/blind").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    started = c.post(
        "/blind",
        data={"csrf": csrf, "synthetic": str(syn), "real": str(real), "n": "6"},
        follow_redirects=False,
    )
    assert started.status_code == 303, started.text
    sid = started.headers["location"].rsplit("/", 1)[1]
    session = blind.load(home.people_dir("blind"), sid)
    assert (
        c.post(f"/blind/{sid}/guess/0", data={"csrf": csrf, "guess": "real"}).status_code == 200
    )  # redirect followed
    pages: dict[str, str] = {}
    for k in range(1, 6):
        pages.setdefault(session.trials[k].source, _trial_page(c, sid))
        c.post(f"/blind/{sid}/guess/{k}", data={"csrf": csrf, "guess": "synthetic"})
    assert pages["real"] == pages["synthetic"]  # a real and a synthetic trial render the same page
    done = c.get(f"/blind/{sid}").text
    assert 'id="done"' in done and "over 6 answered" in done and 'id="crop"' not in done
    assert c.post(f"/blind/{sid}/guess/1", data={"csrf": "wrong", "guess": "real"}).status_code == 403
    assert c.get("/blind/..%2Fetc").status_code in (400, 404)
    assert sid in c.get("/blind").text  # listed with its aggregate
