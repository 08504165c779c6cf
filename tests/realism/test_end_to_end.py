"""Stand-in real tier -> realism report -> a tiny dose-response top-up through the runner (bwrap),
and the leak test: a distinctive planted real image appears in no output but the real set itself."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from synthetic._files import to_unit
from synthetic.splits import read_split
from tests.conftest import CliResult
from tests.realism._home import tiny_home

pytestmark = [pytest.mark.slow, pytest.mark.bwrap,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]
CANARY = "000000_canary_real_7f3a"  # sorts second: the seeded split puts it in real-dev


def _plant(src: Path) -> np.ndarray:
    """A distinctive 16-bit 'real' image (seeded stripes and speckle) with one labelled void."""
    from PIL import Image

    rng = np.random.default_rng(424242)
    pixels = (20000 + 9000 * (np.arange(32)[None, :] % 5) + rng.integers(0, 4000, (32, 32))).astype(np.uint16)
    Image.fromarray(pixels).save(src / "images" / f"{CANARY}.png")
    mask = np.zeros((32, 32), np.uint8)
    mask[10:14, 12:16] = 255
    Image.fromarray(mask).save(src / "masks" / f"{CANARY}.png")
    return pixels


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("e2e")
    home = tiny_home(root / "home")
    runner = _runner()
    outputs = [runner("stand-in", "--out", str(root / "src"), "--n", "120", "--size", "32", "--json",
                      "--home", str(home))]
    pixels = _plant(root / "src")
    outputs.append(runner("data", "import", str(root / "src"), "--out", str(root / "real"), "--real", "--json",
                          "--home", str(home)))
    outputs.append(runner("realism", "--synthetic", "synthetic/v1", "--real", str(root / "real"), "--json",
                          "--home", str(home)))
    outputs.append(runner("topup", "--slice", "thin", "--n", "0,100", "--real", str(root / "real"),
                          "--ticket-budget", "90s", "--epochs", "1", "--budget", "5m", "--run-id", "ci",
                          "--json", "--home", str(home)))
    for out in outputs:
        assert out.returncode == 0, out.stderr
    return {"root": root, "home": home, "pixels": pixels, "outputs": outputs}


def _runner() -> Callable[..., CliResult]:
    import subprocess
    import sys

    from tests.conftest import REPO

    def call(*args: str) -> CliResult:
        proc = subprocess.run([sys.executable, "-m", "segfactory", *args], capture_output=True, text=True,
                              timeout=900, cwd=REPO, env={**__import__("os").environ, "SEGFACTORY_LOG_LEVEL": "INFO"})
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return call


def test_realism_report_is_aggregate_and_says_it_is_not_the_test(run: dict[str, object]) -> None:
    report = json.loads(run["outputs"][2].stdout)  # type: ignore[index]
    assert "not the test that counts" in report["note"] and report["stand_in"] is True
    assert 0.0 <= report["mmd"]["p_value"] <= 1.0 and len(report["slices"]) == 4
    acc = report["classifier"]["accuracy"]
    assert acc["low"] <= acc["estimate"] <= acc["high"] and report["classifier"]["train_seconds"] > 0
    assert Path(report["plot"]).is_file() and Path(report["report"]).is_file()


def test_topup_dose_response_has_both_controls(run: dict[str, object]) -> None:
    report = json.loads(run["outputs"][3].stdout)  # type: ignore[index]
    assert [t["arm"] for t in report["tickets"]] == ["nothing", "synthetic", "augment"]
    assert all(t["status"] == "DONE" for t in report["tickets"])
    rows = report["dose_response"]["rows"]
    assert [r["n"] for r in rows] == [0, 100]
    for arm in ("synthetic", "augment"):
        diff = rows[1][arm]["vs_nothing"]
        assert diff["low"] <= diff["estimate"] <= diff["high"]
    assert report["dose_response"]["turning_point"]["summary"]
    assert report["real_dev"]["stand_in"] is True and report["measured_on"] == "real-dev (host side)"
    home = Path(str(run["home"]))
    assert (home / "runs" / "ci" / "people" / "topup.json").is_file()
    assert "targeted_synthetic" in (home / "runs" / "ci" / "people" / "rounds.jsonl").read_text()


def test_no_real_image_leaks_into_any_output(run: dict[str, object]) -> None:
    root, pixels = Path(str(run["root"])), np.asarray(run["pixels"])
    dev = read_split(root / "real" / "real-dev")
    where = [m["source"] for m in dev.image_meta]
    assert CANARY in where, "the canary must sit in real-dev, which the realism and top-up commands read"
    unit = to_unit(pixels)
    needles = [CANARY.encode(), dev.image_meta[where.index(CANARY)]["sha256"].encode()]
    needles += [unit[r].astype(np.float32).tobytes()[:64] for r in (3, 17, 29)]  # raw float rows
    real_dev = b"".join(p.read_bytes() for p in (root / "real" / "real-dev").iterdir())
    assert all(needle in real_dev for needle in needles)  # positive control: the search finds the canary
    needles += [hashlib.sha256(pixels.tobytes()).hexdigest().encode()]
    needles += [pixels[r].tobytes()[:32] for r in (3, 17, 29)]  # raw 16-bit rows
    scanned = 0
    for path in root.rglob("*"):
        if not path.is_file() or path.is_relative_to(root / "src") or path.is_relative_to(root / "real"):
            continue
        data = path.read_bytes()
        scanned += 1
        for needle in needles:
            assert needle not in data, f"real image material found in {path}"
    streams = "".join(o.stdout + o.stderr for o in run["outputs"])  # type: ignore[attr-defined]
    assert CANARY not in streams and needles[1].decode() not in streams
    assert scanned > 50  # the home, the audit log, ticket folders and reports were all searched
