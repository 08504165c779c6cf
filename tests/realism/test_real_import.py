"""The real tier: stand-in labelled as such, split into real-dev and holdout, bad input refused."""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from analysis.realism import STAND_IN_NOTE, write_stand_in
from analysis.realism.report import load_real
from segfactory.errors import DataError, UsageError
from synthetic.exchange import MIN_REAL_VOIDS, import_real
from synthetic.splits import read_split
from tests.conftest import CliResult


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("standin") / "src"
    wrote = write_stand_in(out, 60, 32, 9001)
    assert set(wrote.model_dump(mode="json")) == {  # `stand-in --json`, a contract
        "out",
        "count",
        "size",
        "seed",
        "stand_in",
        "n_defects",
        "note",
    }
    assert wrote.count == 60 and wrote.n_defects > 0 and wrote.note == STAND_IN_NOTE
    return out


def test_stand_in_import_splits_into_real_dev_and_holdout(stand_in: Path, tmp_path: Path) -> None:
    summary = import_real(stand_in, tmp_path / "real")
    dev, hold = read_split(tmp_path / "real" / "real-dev"), read_split(tmp_path / "real" / "holdout")
    assert summary.counts == {"real-dev": 30, "holdout": 30} and summary.stand_in is True
    shape = {
        "out",
        "kind",
        "stand_in",
        "real_dev",
        "holdout",
        "counts",
        "intensity_mapping",
        "warnings",
        "range",
    }
    assert set(summary.model_dump(mode="json")) == shape  # `data import --real --json`, a contract
    for split, part in ((dev, "real-dev"), (hold, "holdout")):
        assert split.manifest["kind"] == "real" and split.manifest["stand_in"] is True
        assert split.manifest["stand_in_note"] == STAND_IN_NOTE and split.manifest["real_part"] == part
        assert len(split.defects) >= MIN_REAL_VOIDS
        assert sorted({d["image_id"] for d in split.defects}) == sorted(
            {d["image_id"] for d in split.defects if 0 <= d["image_id"] < len(split)}
        )
    assert not set(m["sha256"] for m in dev.image_meta) & set(m["sha256"] for m in hold.image_meta)
    assert stat.S_IMODE((tmp_path / "real").stat().st_mode) == 0o700  # real images: owner only
    assert json.loads((stand_in / "stand_in.json").read_text())["stand_in"] is True


def test_a_real_set_without_masks_is_refused(stand_in: Path, tmp_path: Path) -> None:
    src = tmp_path / "nomasks"
    shutil.copytree(stand_in / "images", src / "images")
    with pytest.raises(DataError, match="has no masks"):
        import_real(src, tmp_path / "real")
    assert not (tmp_path / "real").exists()


def test_a_real_tier_too_small_for_the_minimum_support_is_refused(stand_in: Path, tmp_path: Path) -> None:
    src = tmp_path / "few"
    for sub in ("images", "masks"):
        (src / sub).mkdir(parents=True)
        for path in sorted((stand_in / sub).iterdir())[:6]:
            shutil.copy(path, src / sub / path.name)
    with pytest.raises(DataError, match=f"minimum support is {MIN_REAL_VOIDS}"):
        import_real(src, tmp_path / "real")
    assert not (tmp_path / "real").exists() and not list(tmp_path.glob(".real*"))


def test_realism_refuses_the_holdout_part_and_non_real_sets(stand_in: Path, tmp_path: Path) -> None:
    import_real(stand_in, tmp_path / "real")
    assert len(load_real(tmp_path / "real")) == 30  # the import folder resolves to its real-dev part
    with pytest.raises(UsageError, match="holdout part"):
        load_real(tmp_path / "real" / "holdout")
    from synthetic import generate

    generate(4, 32, 1, workers=1).write(tmp_path / "syn")
    with pytest.raises(DataError, match="not a real set"):
        load_real(tmp_path / "syn")


def test_cli_data_import_real(stand_in: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    result = cli(
        "data",
        "import",
        str(stand_in),
        "--out",
        str(tmp_path / "real"),
        "--real",
        "--json",
        "--home",
        str(tmp_path / "home"),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["stand_in"] is True and out["counts"]["real-dev"] == 30
    images = np.load(tmp_path / "real" / "real-dev" / "images.npy")
    assert images.shape == (30, 32, 32)
