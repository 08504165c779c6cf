"""data check / export / import: corrupt-file detection, bad content, and the round trip."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
from PIL import Image

from segfactory.errors import DataError
from synthetic import generate
from synthetic.check import check_path
from synthetic.exchange import export_png, import_folder
from synthetic.splits import read_split


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(12, 32, seed=4, workers=1).write(tmp_path_factory.mktemp("c") / "split")


@pytest.fixture
def exported(split_dir: Path, tmp_path: Path) -> Path:
    export_png(split_dir, tmp_path / "png")
    return tmp_path / "png"


def kinds(path: Path) -> set[tuple[str, str]]:
    return {(p.kind, p.file) for p in check_path(path).problems}


def test_clean_split_and_round_trip(split_dir: Path, exported: Path, tmp_path: Path) -> None:
    report = check_path(split_dir)
    assert report.ok and report.count == 12 and report.contrast_range is not None
    assert check_path(exported).ok
    import_folder(exported, tmp_path / "back")
    original, back = read_split(split_dir), read_split(tmp_path / "back")
    assert np.array_equal(original.masks, back.masks)
    assert np.abs(original.images - back.images).max() <= 0.5 / 65535 + 1e-7
    assert back.manifest["kind"] == "imported" and check_path(tmp_path / "back").ok


def test_corrupt_files_are_named(exported: Path, tmp_path: Path) -> None:
    (exported / "images" / "000001.png").write_text(
        "<!DOCTYPE html><html><body>502 Bad Gateway</body></html>"
    )
    full = (exported / "images" / "000002.png").read_bytes()
    (exported / "images" / "000002.png").write_bytes(full[: len(full) // 2])
    shutil.copy(exported / "images" / "000003.png", exported / "images" / "000003.jpg")
    (exported / "images" / "000003.png").unlink()
    found = kinds(exported)
    assert {
        ("corrupt", "images/000001.png"),
        ("corrupt", "images/000002.png"),
        ("corrupt", "images/000003.jpg"),
    } <= found
    with pytest.raises(DataError, match="nothing written"):
        import_folder(exported, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".never")]


def test_bad_content_in_import_layout(exported: Path) -> None:
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(exported / "images" / "000004.png")  # blank
    Image.fromarray(np.full((32, 32), 255, np.uint8)).save(exported / "images" / "000005.png")  # saturated
    Image.fromarray(np.zeros((20, 32), np.uint8) + 3).save(exported / "masks" / "000006.png")  # shape
    (exported / "masks" / "000007.png").unlink()
    found = {k for k, _ in kinds(exported)}
    report = check_path(exported)
    assert {"blank", "saturated", "shape", "missing"} <= found
    assert any("000004" in p.message for p in report.problems if p.kind == "blank")


def test_image_shape_mismatch_in_import_layout(exported: Path) -> None:
    Image.fromarray(np.random.default_rng(0).integers(0, 60000, (40, 32)).astype(np.uint16)).save(
        exported / "images" / "000008.png"
    )
    assert ("shape", "images/000008") in kinds(exported)


def _copy(split_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(split_dir, target)
    return target


def test_bad_split_content(split_dir: Path, tmp_path: Path) -> None:
    broken = _copy(split_dir, tmp_path)
    images = np.load(broken / "images.npy")
    images[2, 0, 0] = np.nan
    images[3] = 0.25
    np.save(broken / "images.npy", images)
    rows = [json.loads(line) for line in (broken / "defects.jsonl").read_text().splitlines()]
    rows[0]["area"] += 5
    (broken / "defects.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = {k for k, _ in kinds(broken)}
    assert {"nan", "blank", "mask-mismatch", "hash-mismatch"} <= found


def test_truncated_npy_and_wrong_type(split_dir: Path, tmp_path: Path) -> None:
    broken = _copy(split_dir, tmp_path)
    data = (broken / "masks.npy").read_bytes()
    (broken / "masks.npy").write_bytes(data[:200])
    (broken / "images.npy").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    found = kinds(broken)
    assert ("corrupt", "masks.npy") in found and ("corrupt", "images.npy") in found


def test_import_tiff_16_bit_and_jpeg_8_bit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "images").mkdir(parents=True)
    (src / "masks").mkdir()
    rng = np.random.default_rng(1)
    tifffile.imwrite(src / "images" / "a.tif", rng.integers(1000, 60000, (24, 24)).astype(np.uint16))
    Image.fromarray(rng.integers(20, 230, (24, 24)).astype(np.uint8)).save(
        src / "images" / "b.jpg", quality=95
    )
    mask = np.zeros((24, 24), np.uint8)
    mask[3:7, 3:8] = 1
    mask[15:18, 0:2] = 200
    for stem in ("a", "b"):
        Image.fromarray(mask).save(src / "masks" / f"{stem}.png")
    summary = import_folder(src, tmp_path / "out", "real")
    split = read_split(tmp_path / "out")
    assert summary.n_defects == 4 and split.manifest["kind"] == "real"
    assert [m["bit_depth"] for m in split.image_meta] == [16, 8]
    assert sorted(d["area"] for d in split.defects if d["image_id"] == 0) == [6, 20]
    assert any(d["edge"] for d in split.defects)
    assert check_path(tmp_path / "out").ok
    import_folder(src, tmp_path / "unl", "unlabelled")
    assert read_split(tmp_path / "unl").masks.sum() == 0 and check_path(tmp_path / "unl").ok


def test_cli_check_names_bad_files_and_exits_non_zero(exported: Path, cli: Callable[..., Any]) -> None:
    (exported / "images" / "000001.png").write_text("<html>oops</html>")
    result = cli("data", "check", str(exported), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["problems"][0]["file"] == "images/000001.png"
