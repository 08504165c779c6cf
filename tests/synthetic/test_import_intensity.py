"""data import: bit depth and the intensity mapping, recorded; warnings name numbers and flags."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image

from segfactory.errors import DataError, UsageError
from synthetic import generate
from synthetic.exchange import export_png, import_folder, import_real
from synthetic.mapping import MappingRequest
from synthetic.splits import image_sha256, read_split, write_split
from tests.conftest import CliResult

SIZE = 32


def _masks(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        mask = np.zeros((SIZE, SIZE), np.uint8)
        y, x = rng.integers(4, SIZE - 8, 2)
        mask[y : y + 4, x : x + 4] = 255
        out.append(mask)
    return out


def write_set(root: Path, raw: list[np.ndarray], suffix: str = ".png", **tiff: object) -> Path:
    """An import-layout folder holding ``raw`` pixel arrays as they are (no rescaling)."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i, (pixels, mask) in enumerate(
        zip(raw, _masks(len(raw), np.random.default_rng(len(raw))), strict=True)
    ):
        if suffix == ".png":
            Image.fromarray(pixels).save(root / "images" / f"{i:03d}.png")
        else:
            tifffile.imwrite(root / "images" / f"{i:03d}{suffix}", pixels, **tiff)  # type: ignore[arg-type]
        Image.fromarray(mask).save(root / "masks" / f"{i:03d}.png")
    return root


def detector(n: int, low: int, high: int, seed: int = 0, dtype: type = np.uint16) -> list[np.ndarray]:
    """Detector counts spanning exactly ``low..high`` (first image pinned to both ends)."""
    rng = np.random.default_rng(seed)
    images = [rng.integers(low, high + 1, (SIZE, SIZE)).astype(dtype) for _ in range(n)]
    images[0][0, 0], images[0][0, 1] = low, high
    return images


def test_12_bit_in_16_bit_png_is_detected_recorded_and_mapped(tmp_path: Path) -> None:
    src = write_set(tmp_path / "src", detector(6, 400, 3300))
    summary = import_folder(src, tmp_path / "out")
    split = read_split(tmp_path / "out")
    mapping = split.manifest["intensity_mapping"]
    assert mapping["mode"] == "bit-depth" and mapping["bit_depth"] == 12
    assert mapping["detected_from"] == "data maximum 3300"
    assert mapping["windows"] == {"16": [0.0, 4095.0]} and mapping["raw_range"] == {"16": [400, 3300]}
    assert {(m["bit_depth"], m["container_bits"]) for m in split.image_meta} == {(12, 16)}
    assert split.images.min() == pytest.approx(400 / 4095) and split.images.max() == pytest.approx(
        3300 / 4095
    )
    assert summary.warnings == [] and summary.range == pytest.approx((400 / 4095, 3300 / 4095))
    assert split.manifest["intensity"]["intensity"]["median"] > 0.3  # recorded stats of the mapped set


def test_12_bit_read_as_16_bit_warns_with_numbers_and_the_flag(tmp_path: Path) -> None:
    src = write_set(tmp_path / "src", detector(6, 400, 3300))
    summary = import_folder(src, tmp_path / "out", request=MappingRequest(bit_depth=16))
    split = read_split(tmp_path / "out")
    assert split.manifest["intensity_mapping"]["windows"] == {"16": [0.0, 65535.0]}
    assert split.images.max() == pytest.approx(3300 / 65535)
    (warning,) = summary.warnings
    assert "values 400..3300 use 4.4% of the 16-bit range 0..65535" in warning
    assert "--bit-depth 12" in warning and "--window 400:3300" in warning
    assert split.manifest["import_warnings"] == summary.warnings


def test_14_bit_tiff_set_detected_from_data_and_from_bits_per_sample(tmp_path: Path) -> None:
    import_folder(write_set(tmp_path / "plain", detector(5, 1000, 12000), ".tif"), tmp_path / "a")
    a = read_split(tmp_path / "a")
    assert a.manifest["intensity_mapping"]["bit_depth"] == 14
    assert a.manifest["intensity_mapping"]["windows"] == {"16": [0.0, 16383.0]}
    assert a.images.min() == pytest.approx(1000 / 16383) and a.images.max() == pytest.approx(12000 / 16383)
    # values that would fit 12 bits, but the files declare 14 (BitsPerSample): the declaration wins
    import_folder(
        write_set(tmp_path / "declared", detector(5, 100, 3000), ".tif", bitspersample=14), tmp_path / "b"
    )
    b = read_split(tmp_path / "b")
    assert b.manifest["intensity_mapping"]["bit_depth"] == 14
    assert "declaration" in b.manifest["intensity_mapping"]["detected_from"]
    assert b.images.max() == pytest.approx(3000 / 16383)


def test_8_bit_set(tmp_path: Path) -> None:
    summary = import_folder(
        write_set(tmp_path / "src", detector(4, 20, 230, dtype=np.uint8)), tmp_path / "out"
    )
    split = read_split(tmp_path / "out")
    mapping = split.manifest["intensity_mapping"]
    assert (mapping["bit_depth"], mapping["windows"], mapping["detected_from"]) == (
        8,
        {"8": [0.0, 255.0]},
        "8-bit files",
    )
    assert [m["bit_depth"] for m in split.image_meta] == [8] * 4
    assert summary.range == pytest.approx((20 / 255, 230 / 255))


def test_window_and_percentile_are_recorded_and_shared_by_both_real_parts(tmp_path: Path) -> None:
    src = write_set(tmp_path / "src", detector(6, 400, 3300))
    import_folder(src, tmp_path / "w", request=MappingRequest(window=(400, 3300)))
    w = read_split(tmp_path / "w")
    assert w.manifest["intensity_mapping"]["windows"] == {"16": [400.0, 3300.0]}
    assert (w.images.min(), w.images.max()) == (0.0, 1.0)
    import_folder(src, tmp_path / "p", request=MappingRequest(percentile=(1, 99)))
    p = read_split(tmp_path / "p").manifest["intensity_mapping"]
    low, high = p["windows"]["16"]
    assert (
        p["mode"] == "percentile" and p["percentiles"] == [1.0, 99.0] and 400 < low < 500 < 3200 < high < 3300
    )
    real_src = write_set(tmp_path / "real-src", detector(48, 400, 3300, seed=3))
    import_real(real_src, tmp_path / "real", request=MappingRequest(percentile=(1, 99)))
    parts = [read_split(tmp_path / "real" / part).manifest for part in ("real-dev", "holdout")]
    assert parts[0]["intensity_mapping"] == parts[1]["intensity_mapping"]
    assert parts[0]["intensity_mapping"]["mode"] == "percentile"
    assert parts[0]["intensity"]["content_hash"] == parts[0]["content_hash"]  # each part's own stats


def test_saturation_and_values_above_the_declared_depth_warn(tmp_path: Path) -> None:
    raw = detector(4, 400, 3300)
    for image in raw:
        image[:4] = 4095  # an eighth of every image at the 12-bit top: the detector saturated
    summary = import_folder(write_set(tmp_path / "sat", raw), tmp_path / "a")
    assert any("12.5% of pixels sit at the top of the mapping (4095 -> 1)" in w for w in summary.warnings)
    raw = detector(4, 400, 3300)
    raw[1][0, :3] = 5000
    summary = import_folder(
        write_set(tmp_path / "above", raw), tmp_path / "b", request=MappingRequest(bit_depth=12)
    )
    (warning,) = summary.warnings
    assert warning.startswith("3 pixels (0.07%) lie above 4095, the top of the declared 12-bit range")
    assert "--bit-depth 14" in warning


def test_window_on_mixed_8_and_16_bit_files_is_refused(tmp_path: Path) -> None:
    src = write_set(tmp_path / "src", detector(2, 400, 3300))
    Image.fromarray(detector(1, 20, 200, dtype=np.uint8)[0]).save(src / "images" / "009.png")
    Image.fromarray(np.zeros((SIZE, SIZE), np.uint8)).save(src / "masks" / "009.png")
    with pytest.raises(DataError, match="mixes 8-bit and 16-bit files"):
        import_folder(src, tmp_path / "out", request=MappingRequest(window=(0, 4095)))
    assert not (tmp_path / "out").exists()


def test_bad_flags_are_one_clear_usage_error() -> None:
    with pytest.raises(UsageError, match="choose one intensity mapping; got --bit-depth, --window"):
        MappingRequest.from_flags(12, "0:10", None)
    with pytest.raises(UsageError, match="--window takes LOW:HIGH"):
        MappingRequest.from_flags(None, "4095", None)
    with pytest.raises(UsageError, match="--percentile P_LOW:P_HIGH needs"):
        MappingRequest.from_flags(None, None, "99:1")


def test_multi_page_tiff_is_refused_naming_the_file(tmp_path: Path) -> None:
    src = write_set(tmp_path / "src", detector(2, 400, 3300), ".tif")
    tifffile.imwrite(src / "images" / "001.tif", np.stack(detector(3, 400, 3300)), photometric="minisblack")
    with pytest.raises(
        DataError, match=r"images/001\.tif: multi-page TIFF \(3 pages\); import takes one image"
    ):
        import_folder(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _dicom(path: Path, pixels: np.ndarray, bits_stored: int) -> None:
    pydicom = pytest.importorskip("pydicom")
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"  # secondary capture
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Rows, ds.Columns = pixels.shape
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, bits_stored, bits_stored - 1, 0
    ds.PixelData = pixels.astype(np.uint16).tobytes()
    ds.save_as(path, enforce_file_format=True)


def test_dicom_reads_its_bits_stored(tmp_path: Path) -> None:
    src = write_set(tmp_path / "src", [])
    for i, pixels in enumerate(detector(3, 100, 3000)):
        _dicom(src / "images" / f"{i:03d}.dcm", pixels, bits_stored=14)
        Image.fromarray(_masks(1, np.random.default_rng(i))[0]).save(src / "masks" / f"{i:03d}.png")
    import_folder(src, tmp_path / "out")
    mapping = read_split(tmp_path / "out").manifest["intensity_mapping"]
    assert mapping["bit_depth"] == 14 and "declaration" in mapping["detected_from"]


def test_dicom_without_pydicom_says_how_to_convert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_set(tmp_path / "src", detector(1, 400, 3300))
    header = b"\0" * 128 + b"DICM" + b"\0" * 64  # the DICOM preamble: enough to be sniffed as one
    (src / "images" / "000.png").unlink()
    (src / "images" / "000.dcm").write_bytes(header)
    monkeypatch.setitem(sys.modules, "pydicom", None)  # what an environment without pydicom sees
    with pytest.raises(
        DataError,
        match=r"000\.dcm: DICOM/DICONDE file, and pydicom is not installed: install "
        r"pydicom .*dcm2pnm \+on2",
    ):
        import_folder(src, tmp_path / "out")


def test_export_of_a_dark_set_imports_back_exactly(tmp_path: Path) -> None:
    bright = read_split(generate(6, SIZE, seed=2, workers=1).write(tmp_path / "syn"))
    dark = bright.images * np.float32(0.2)  # under 1/4 of full scale: data alone would say 14 bits
    meta = [{**m, "sha256": image_sha256(x)} for m, x in zip(bright.image_meta, dark, strict=True)]
    write_split(tmp_path / "dark", dark, bright.masks, meta, bright.defects, {"generator": "test"})
    export_png(tmp_path / "dark", tmp_path / "png")
    import_folder(tmp_path / "png", tmp_path / "back")
    back = read_split(tmp_path / "back")
    assert back.manifest["intensity_mapping"]["bit_depth"] == 16  # the export's sBIT chunk says so
    assert np.abs(back.images - dark).max() <= 0.5 / 65535 + 1e-7


def test_cli_import_prints_the_detection_and_json_keeps_its_keys(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    src = write_set(tmp_path / "src", detector(4, 400, 3300))
    home = ["--home", str(tmp_path / "home")]
    res = cli("data", "import", str(src), "--out", str(tmp_path / "a"), *home)
    assert res.returncode == 0, res.stderr
    assert "source bit depth 12 (from data maximum 3300)" in res.stderr and "pass --bit-depth N" in res.stderr
    res = cli("data", "import", str(src), "--out", str(tmp_path / "b"), "--bit-depth", "16", "--json", *home)
    out = json.loads(res.stdout)
    assert set(out) == {"out", "count", "kind", "n_defects", "intensity_mapping", "warnings", "range"}
    assert set(out["intensity_mapping"]) == {
        "mode",
        "bit_depth",
        "detected_from",
        "windows",
        "raw_range",
        "percentiles",
        "formula",
    }
    assert out["range"] == pytest.approx([400 / 65535, 3300 / 65535]) and out["kind"] == "imported"
    assert "warning: values 400..3300 use 4.4%" in res.stderr
    res = cli(
        "data",
        "import",
        str(src),
        "--out",
        str(tmp_path / "c"),
        "--bit-depth",
        "12",
        "--window",
        "1:2",
        *home,
    )
    assert res.returncode != 0 and res.stderr.strip().splitlines() == [
        "segfactory: error: choose one intensity mapping; got --bit-depth, --window"
    ]
    assert not (tmp_path / "c").exists()
