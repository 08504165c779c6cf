"""The blind-test API mounted on the real console app: start, crop PNGs, guesses, result, audit."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audit import AuditLog, MemoryAnchorStore
from segfactory.home import Home
from synthetic import generate
from synthetic._io import import_real
from synthetic.realism.standin import write_stand_in


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[Any, Path, Path, Home]]:
    from fastapi.testclient import TestClient

    from console import Auth, create_app
    from console.blind import router

    write_stand_in(tmp_path / "src", 60, 32, 9001)
    import_real(tmp_path / "src", tmp_path / "real")
    generate(20, 32, 1, workers=1).write(tmp_path / "syn")
    home = Home.resolve(tmp_path / "home")
    home.root.mkdir(parents=True)
    with AuditLog(home, MemoryAnchorStore()) as log:
        app = create_app(home, log, auth=Auth("test-token"), person="human:tester")
        app.include_router(router)
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
