"""Set statistics, the training-range comparison and the split integrity check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from segfactory.errors import DataError
from synthetic.check import require_intact
from synthetic.intensity import SHIFT_FACTOR, compare, set_stats, split_stats
from synthetic.splits import read_split, write_split
from tests.vision._data import draw


def test_a_rescaled_set_is_outside_and_the_same_set_inside() -> None:
    images, masks, _, _ = draw(40, 32, 0)
    train = set_stats(images, masks)
    assert not compare(set_stats(draw(40, 32, 1)[0], draw(40, 32, 1)[1]), train).outside
    dark = compare(set_stats(images * np.float32(3300 / 65535), masks), train)
    assert dark.outside and {r.split(":")[0] for r in dark.reasons} == {"intensity", "spread", "noise"}
    assert dark.stats["contrast"].outside is False  # type: ignore[union-attr]  # a gain leaves Michelson contrast unchanged


def test_the_bound_is_the_stated_factor() -> None:
    images, masks, _, _ = draw(40, 32, 0)
    train = set_stats(images, masks)
    just_inside = np.float32(train.intensity.low / SHIFT_FACTOR * 1.05 / train.intensity.median)
    just_outside = np.float32(train.intensity.low / SHIFT_FACTOR * 0.95 / train.intensity.median)
    assert not compare(set_stats(images * just_inside, masks), train).stats["intensity"].outside  # type: ignore[union-attr]
    assert compare(set_stats(images * just_outside, masks), train).stats["intensity"].outside  # type: ignore[union-attr]


def test_unlabelled_sets_skip_contrast() -> None:
    images, masks, _, _ = draw(10, 32, 0)
    result = compare(set_stats(images, None), set_stats(images, masks))
    assert result.stats["contrast"] is None and not result.outside


def _split(root: Path, n: int = 6) -> Path:
    images, masks, meta, defects = draw(n, 16, 0)
    return write_split(root, images, masks, meta, defects, {"generator": "test"})


def test_cached_stats_are_used_only_for_their_content(tmp_path: Path) -> None:
    folder = _split(tmp_path / "s")
    split = read_split(folder)
    fresh = split_stats(split)
    assert fresh.content_hash == split.content_hash
    fake = fresh.model_copy(update={"n_images": 999}).model_dump(mode="json")
    split.manifest["intensity"] = fake
    assert split_stats(split).n_images == 999  # cached: this content
    split.manifest["intensity"] = {**fake, "content_hash": "0" * 64}
    assert split_stats(split).n_images == 6  # another content: recomputed


def test_a_changed_images_npy_is_refused_naming_the_file(tmp_path: Path) -> None:
    folder = _split(tmp_path / "s")
    require_intact(folder)
    images = np.load(folder / "images.npy")
    images[0, 0, 0] += 0.01
    np.save(folder / "images.npy", images)
    with pytest.raises(DataError, match=r"s/images\.npy does not match .*manifest\.json: it has sha256"):
        require_intact(folder)
    (folder / "images.npy").unlink()
    with pytest.raises(DataError, match=r"images\.npy does not match .*: it is missing"):
        require_intact(folder)


def test_a_manifest_without_file_hashes_is_refused(tmp_path: Path) -> None:
    folder = _split(tmp_path / "s")
    (folder / "manifest.json").write_text('{"generator": "hand-made"}')
    with pytest.raises(DataError, match="records no file hashes"):
        require_intact(folder)
