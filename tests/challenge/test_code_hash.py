"""The code hash of a challenge's conditions: the host's own tree, read with bounds, or a refusal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.challenge import _locate
from agents.challenge._locate import code_sha256
from segfactory.errors import DataError
from tests.challenge.conftest import make_ticket


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the host's vision/ package (the tree the hash reads)."""
    vision = tmp_path / "src" / "vision"
    vision.mkdir(parents=True)
    (vision / "model.py").write_text("WIDTH = 16\n")
    monkeypatch.setattr(_locate, "VISION_DIR", vision)
    return vision


def test_the_hash_covers_the_hosts_files_and_a_code_tickets_edits(tree: Path) -> None:
    config = make_ticket()
    code = make_ticket().model_copy(
        update={"kind": "code", "change": {"files": {"vision/model.py": "W = 32\n"}}}
    )
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__" / "model.cpython-312.pyc").write_bytes(b"\0" * 10)  # left out
    before = code_sha256(config)
    assert before == code_sha256(config) != code_sha256(code)
    (tree / "model.py").write_text("WIDTH = 17\n")
    assert code_sha256(config) != before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", ["symlink", "fifo", "too_big"])
def test_a_tree_it_cannot_read_safely_is_refused_with_the_reason(
    tree: Path, plant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if plant == "symlink":
        (tree / "zero.py").symlink_to("/dev/zero")
        match = "zero.py is a symlink"
    elif plant == "fifo":
        os.mkfifo(tree / "pipe.py")
        match = "pipe.py is a special file"
    else:
        monkeypatch.setattr(_locate, "MAX_CODE_FILE_BYTES", 8)
        match = "over MAX_CODE_FILE_BYTES=8"
    with pytest.raises(DataError, match=match):
        code_sha256(make_ticket())
