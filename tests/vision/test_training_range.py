"""evaluate / analyse: the split is verified before scoring, and a set outside the training range is
marked."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from segfactory.profiles import get_profile
from synthetic import generate
from synthetic.exchange import export_png
from synthetic.splits import read_split
from tests.conftest import REPO, CliResult
from tests.vision._data import make_version
from vision.training_data import (
    TICKET_MANIFEST,
    TrainingRange,
    collapse_finding,
    find_training_data,
    training_range,
)


def _tamper(split_dir: Path) -> None:
    images = np.load(split_dir / "images.npy")
    images[0] = np.clip(images[0] * 1.1, 0, 1)
    np.save(split_dir / "images.npy", images)


def test_evaluate_refuses_a_changed_images_npy(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    data = make_version(tmp_path / "v", 4, 4, 16)
    _tamper(data / "dev")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"never read: the data is refused first")
    res = cli("evaluate", "--model", str(model), "--data", str(data), "--json")
    assert res.returncode != 0 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert f"{data / 'dev' / 'images.npy'} does not match" in line and "not scored" in line


def test_analyse_refuses_a_changed_train_split(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    data = make_version(tmp_path / "v", 4, 4, 16)
    _tamper(data / "train")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"never read")
    res = cli(
        "analyse", "--model", str(model), "--data", str(data), "--json", "--home", str(tmp_path / "home")
    )
    assert res.returncode != 0 and f"{data / 'train' / 'images.npy'} does not match" in res.stderr


def test_training_data_is_found_through_a_ticket_manifest(tmp_path: Path) -> None:
    data = make_version(tmp_path / "v", 6, 4, 16)
    ticket = tmp_path / "tickets" / "t1"
    ticket.mkdir(parents=True)
    (ticket / "model.onnx").write_bytes(b"x")
    train = read_split(data / "train")
    manifest = {"train": {"path": str(data / "train"), "content_hash": train.content_hash}, "dev": {}}
    (ticket / TICKET_MANIFEST).write_text(json.dumps(manifest))
    found = find_training_data(ticket / "model.onnx")
    assert found is not None and found.source == "training manifest" and found.stats.n_images == 6
    manifest["train"]["content_hash"] = "f" * 64  # the split at that path is no longer the training data
    (ticket / TICKET_MANIFEST).write_text(json.dumps(manifest))
    block = training_range(found.stats, ticket / "model.onnx")
    assert block.known is False and "no longer there" in (block.reason or "")
    assert training_range(found.stats, ticket / "model.onnx", data).known is True  # --train-data wins
    alone = training_range(found.stats, tmp_path / "elsewhere" / "model.onnx")
    assert alone.known is False and alone.outside is None and "pass --train-data" in (alone.reason or "")
    assert set(alone.as_json()) == {"known", "outside", "reason", "set"}  # the JSON of an unknown range


def test_zero_detections_outside_the_range_read_as_a_shift() -> None:
    def finding(outside: bool | None, detections: int, voids: int) -> TrainingRange:
        return collapse_finding(TrainingRange(known=outside is not None, outside=outside), detections, voids)

    assert finding(True, 0, 5).finding == "shift"
    assert "not a finding about the model" in (finding(True, 0, 5).message or "")
    assert finding(False, 0, 5).finding == "model"
    assert finding(None, 0, 5).finding == "unknown"
    assert finding(True, 3, 5).finding is None
    assert finding(True, 0, 0).zero_detections is False  # nothing to detect
    assert set(finding(None, 0, 5).as_json()) == {"known", "outside", "zero_detections", "finding", "message"}


def _write_12_bit(png_dir: Path, out: Path) -> Path:
    """The exported 16-bit PNGs requantised as a 12-bit detector writes them: values 0..4095."""
    (out / "images").mkdir(parents=True)
    (out / "masks").symlink_to(png_dir / "masks")
    for path in sorted((png_dir / "images").iterdir()):
        unit = np.asarray(Image.open(path), dtype=np.float64) / 65535
        Image.fromarray(np.round(unit * 4095).astype(np.uint16)).save(out / "images" / path.name)
    return out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A one-epoch model trained on demo-profile data, and its dev set as a 12-bit detector writes it."""
    root = tmp_path_factory.mktemp("demo-run")
    size = get_profile("demo").image_size
    generate(48, size, 11, workers=1).write(root / "v" / "train")
    generate(24, size, 12, workers=1).write(root / "v" / "dev")
    config = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    config.update(epochs=1, batch_size=16)
    config["model"]["decoder_width"] = 8
    (root / "c.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "segfactory",
            "train",
            "--config",
            str(root / "c.yaml"),
            "--data",
            str(root / "v"),
            "--out",
            str(root / "run"),
            "--json",
            "--home",
            str(root / "home"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    export_png(root / "v" / "dev", root / "png")
    return {
        "root": root,
        "run": root / "run",
        "home": root / "home",
        "detector": _write_12_bit(root / "png", root / "detector"),
    }


@pytest.mark.slow
def test_a_demo_model_on_a_mis_scaled_set_is_outside_its_training_range(
    cli: Callable[..., CliResult], demo_run: dict[str, Path], tmp_path: Path
) -> None:
    run, src, home = demo_run["run"], demo_run["detector"], ["--home", str(demo_run["home"])]
    assert (run / "training_data.json").is_file()
    res = cli("data", "import", str(src), "--out", str(tmp_path / "wrong"), "--bit-depth", "16", *home)
    assert res.returncode == 0 and "less than 1/16" in res.stderr and "--bit-depth 12" in res.stderr
    assert cli("data", "import", str(src), "--out", str(tmp_path / "right"), *home).returncode == 0

    reports = {}
    for name in ("wrong", "right"):
        res = cli(
            "evaluate", "--model", str(run), "--data", str(tmp_path / name), "--n-boot", "20", "--json", *home
        )
        assert res.returncode == 0, res.stderr
        reports[name] = json.loads(res.stdout)
    wrong, right = reports["wrong"], reports["right"]
    assert (
        wrong["outside_training_range"] is True and wrong["training_range"]["source"] == "training_data.json"
    )
    assert {r.split(":")[0] for r in wrong["training_range"]["reasons"]} >= {"intensity", "noise"}
    assert not wrong["training_range"]["zero_detections"] or wrong["training_range"]["finding"] == "shift"
    assert right["outside_training_range"] is False and right["training_range"]["reasons"] == []
    assert {"metrics", "intervals", "worst_slice", "per_image"} <= set(wrong)  # the old keys stay
    res = cli("evaluate", "--model", str(run), "--data", str(tmp_path / "wrong"), "--n-boot", "20", *home)
    assert res.returncode == 0 and "outside the training range" in res.stdout


@pytest.mark.slow
def test_analyse_marks_a_mis_scaled_set_in_json_and_report(
    cli: Callable[..., CliResult], demo_run: dict[str, Path], tmp_path: Path
) -> None:
    home = ["--home", str(demo_run["home"])]
    assert (
        cli(
            "data",
            "import",
            str(demo_run["detector"]),
            "--out",
            str(tmp_path / "wrong"),
            "--bit-depth",
            "16",
            *home,
        ).returncode
        == 0
    )
    res = cli(
        "analyse",
        "--model",
        str(demo_run["run"]),
        "--data",
        str(tmp_path / "wrong"),
        "--no-labels",
        "--out",
        str(tmp_path / "an"),
        "--json",
        *home,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["outside_training_range"] is True and out["training_range"]["known"] is True
    assert out["notes"][0].startswith("the analysed set lies outside the model's training range: intensity:")
    assert (
        "outside the model's training range"
        in json.loads((tmp_path / "an" / "report.json").read_text())["notes"][0]
    )


def test_evaluate_json_keys_are_present_only_when_they_apply(tmp_path: Path) -> None:
    """The report's ``--json`` shape: ``comparison`` and ``robustness`` only when asked for, a
    defect slice without ``n_objects``, integer counts per image (the shape is a contract)."""
    from tests.gate import models
    from vision.evaluate import evaluate

    data = make_version(tmp_path / "v", 4, 24, 32)
    model = models.save(models.threshold_model(), tmp_path / "a.onnx")
    other = models.save(models.threshold_model(bias=-0.45), tmp_path / "b.onnx")
    plain = evaluate(model, data / "dev", n_boot=20).as_json()
    assert set(plain) == {
        "model",
        "data",
        "threshold",
        "iou_match",
        "metrics",
        "intervals",
        "worst_slice",
        "per_image",
        "training_range",
        "outside_training_range",
    }
    assert set(plain["intervals"]["object_f1"]) == {"estimate", "low", "high", "alpha"}
    assert all(isinstance(v, int) for v in plain["per_image"]["object_tp"])
    rows = plain["worst_slice"]["slices"]
    assert rows and all(("n_objects" in r) == (r["kind"] == "image") for r in rows)
    assert plain["outside_training_range"] is None and plain["training_range"]["known"] is False
    full = evaluate(model, data / "dev", n_boot=20, compare_to=other, with_robustness=True).as_json()
    assert set(full) - set(plain) == {"comparison", "robustness"}
    assert set(full["comparison"]) == {
        "reference_model",
        "metric",
        "reference",
        "candidate",
        "diff",
        "excludes_zero",
        "reference_metrics",
    }
    assert {type(c["value"]) for c in full["robustness"]["cells"] if c["perturbation"] == "shift"} == {int}
