"""On the demo profile, through the real CLI: ``init --profile demo`` -> stand-in real tier
(import --real, gate add-real, a real-holdout milestone) -> realism report -> a small dose-response
top-up through the runner (bwrap) and round two; and the leak test: a distinctive planted real
image appears in no output but the real set itself.

Sized to run in about four minutes on an idle 2-core box: 120 stand-in images of 64x64; the
realism report on the demo's whole ``synthetic/v1``; the top-up on ``demo-small/v1`` (the first
192 train and 64 dev images of ``synthetic/v1``), doses 0 and 100, one epoch of the demo run
config (32-px crops) per ticket."""

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

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
CANARY = "000000_canary_real_7f3a"  # sorts second: the seeded split puts it in real-dev
SIDE = 64  # the demo profile's image side
SMALL = {
    "train": 192,
    "dev": 64,
}  # images of synthetic/v1 the top-up base keeps (keeps each ticket ~15 CPU-s)
TICKET_BUDGET = (
    "120s"  # device-time cap per ticket, the demo policy's limit (every arm and round two get the same)
)


def _plant(src: Path) -> np.ndarray:
    """A distinctive 16-bit 'real' image (seeded stripes and speckle) with one labelled void."""
    from PIL import Image

    rng = np.random.default_rng(424242)
    pixels = (20000 + 9000 * (np.arange(SIDE)[None, :] % 5) + rng.integers(0, 4000, (SIDE, SIDE))).astype(
        np.uint16
    )
    Image.fromarray(pixels).save(src / "images" / f"{CANARY}.png")
    mask = np.zeros((SIDE, SIDE), np.uint8)
    mask[10:14, 12:16] = 255
    Image.fromarray(mask).save(src / "masks" / f"{CANARY}.png")
    return pixels


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("e2e")
    home, real = root / "home", root / "real"
    cli = _runner(home)
    outputs = [
        cli("init", "--profile", "demo", "--json"),
        cli("stand-in", "--out", str(root / "src"), "--n", "120", "--size", str(SIDE), "--json"),
    ]
    pixels = _plant(root / "src")
    outputs.append(cli("data", "import", str(root / "src"), "--out", str(real), "--real", "--json"))
    outputs.append(cli("gate", "add-real", str(real / "holdout"), "--json"))
    outputs.append(cli("realism", "--synthetic", "synthetic/v1", "--real", str(real), "--json"))
    base = _small_base(home, root / "small")
    outputs.append(
        cli(
            "topup",
            "--slice",
            "thin",
            "--n",
            "0,100",
            "--real",
            str(real),
            "--data",
            base,
            "--config",
            "configs/run-demo.yaml",
            "--ticket-budget",
            TICKET_BUDGET,
            "--epochs",
            "1",
            "--budget",
            "8m",
            "--run-id",
            "ci",
            "--round-two",
            "--json",
        )
    )
    for out in outputs:
        assert out.returncode == 0, out.stderr[-3000:]
    nothing = json.loads(outputs[-1].stdout)["tickets"][0]["model"]
    outputs.append(
        cli(
            "gate",
            "milestone",
            "--name",
            "real-check",
            "--run",
            "ci",
            "--model",
            nothing,
            "--tiers",
            "real-holdout",
            "--json",
        )
    )
    assert outputs[-1].returncode == 0, outputs[-1].stderr[-3000:]
    return {"root": root, "home": home, "pixels": pixels, "outputs": outputs}


def _small_base(home: Path, work: Path) -> str:
    """An approved version holding the first images of the demo's synthetic/v1 (its child)."""
    from synthetic.splits import write_split
    from synthetic.versions import create_version, resolve

    demo = resolve(home, "synthetic/v1")
    for name, n in SMALL.items():
        split = read_split(demo.path / name)
        meta = split.image_meta[:n]
        ids = {str(m["id"]) for m in meta}
        write_split(
            work / name,
            np.asarray(split.images[:n]),
            np.asarray(split.masks[:n]),
            meta,
            [d for d in split.defects if str(d["image_id"]) in ids],
            dict(split.manifest),
        )
    return create_version(
        home, "demo-small", {s: work / s for s in SMALL}, parent=demo.ref, approve_it=True
    ).ref


def _runner(home: Path) -> Callable[..., CliResult]:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {
        **os.environ,
        "SEGFACTORY_LOG_LEVEL": "INFO",
        "SEGFACTORY_NO_USER_SEPARATION": "1",
    }  # a throw-away home

    def call(*args: str) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "segfactory", *args, "--home", str(home)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=REPO,
            env=env,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return call


def test_realism_report_is_aggregate_and_says_it_is_not_the_test(run: dict[str, object]) -> None:
    report = json.loads(run["outputs"][4].stdout)  # type: ignore[index]
    assert "not the test that counts" in report["note"] and report["stand_in"] is True
    assert 0.0 <= report["mmd"]["p_value"] <= 1.0 and len(report["slices"]) == 4
    acc = report["classifier"]["accuracy"]
    assert acc["low"] <= acc["estimate"] <= acc["high"] and report["classifier"]["train_seconds"] > 0
    assert Path(report["plot"]).is_file() and Path(report["report"]).is_file()
    assert set(report["classifier"]) == {
        "accuracy",
        "n_train",
        "n_held_out",
        "steps",
        "batch",
        "train_seconds",
        "chance",
        "distinguishable",
    }  # the --json shape is a contract


def test_topup_dose_response_has_both_controls(run: dict[str, object]) -> None:
    report = json.loads(run["outputs"][5].stdout)  # type: ignore[index]
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


def test_the_real_tier_reaches_the_vault_and_a_milestone(run: dict[str, object]) -> None:
    outputs = run["outputs"]
    imported = json.loads(outputs[2].stdout)  # type: ignore[index]
    assert imported["stand_in"] is True and imported["counts"]["real-dev"] >= 40
    assert json.loads(outputs[3].stdout)["tier"] == "real-holdout"  # type: ignore[index]
    milestone = json.loads(outputs[6].stdout)  # type: ignore[index]
    assert milestone["tiers"] == ["real-holdout"] and Path(milestone["report"]).is_file()


def test_round_two_targets_a_dev_slice_with_another_kind_of_fix(run: dict[str, object]) -> None:
    from controls.rounds import read_rounds

    second = json.loads(run["outputs"][5].stdout)["round_two"]  # type: ignore[index]
    assert set(second) == {  # topup --round-two --json, a contract
        "slice",
        "slice_effect",
        "slice_n",
        "confirmed",
        "fix_kind",
        "change",
        "reason",
        "ticket",
        "status",
        "chosen_from",
        "result",
        "miss_rate_change",
    }
    assert second["fix_kind"] in ("training", "model") and second["chosen_from"].startswith("dev analysis")
    assert second["status"] == "DONE" and second["result"]
    change = second["miss_rate_change"]
    assert change["low"] <= change["estimate"] <= change["high"]
    rounds = read_rounds(Path(str(run["home"])) / "runs" / "ci" / "people")
    assert [r.fix_kind for r in rounds] == ["targeted_synthetic", second["fix_kind"]]
    assert rounds[1].slice == second["slice"] != rounds[0].slice


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
