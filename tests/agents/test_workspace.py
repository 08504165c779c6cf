"""Workspace paths: beneath the root, no symlinks followed, protected locations refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.workspace import MAX_READ_BYTES, PathRefused, Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ticket"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('train')\n")
    (tmp_path / "secret.txt").write_text("outside")
    return Workspace(root)


def test_read_write_list_inside(ws: Workspace) -> None:
    assert ws.read("code/train.py")[0] == "print('train')\n"
    assert ws.write("code/new/aug.py", "x = 1\n") == 6
    assert (ws.root / "code" / "new" / "aug.py").read_text() == "x = 1\n"
    names = [e["name"] for e in ws.list("code")[0]]
    assert names == ["new", "train.py"]


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "code/../../secret.txt", "a\x00b"])
def test_escapes_are_refused(ws: Workspace, path: str) -> None:
    with pytest.raises(PathRefused) as info:
        ws.read(path)
    assert info.value.kind == "path_escape_attempt"


@pytest.mark.parametrize(
    "path",
    [
        "vault/seeds.json",
        "code/../people/report.md",
        "/proc/1/environ",
        "/var/lib/segfactory/vault/confirm-a/labels.npy",
    ],
)
def test_protected_paths_are_refused_as_such(ws: Workspace, path: str) -> None:
    with pytest.raises(PathRefused) as info:
        ws.read(path)
    assert info.value.kind == "protected_read_attempt"


@pytest.mark.parametrize("link_at", ["code/link.txt", "code/linkdir"])
def test_symlinks_are_never_followed(ws: Workspace, tmp_path: Path, link_at: str) -> None:
    target = tmp_path / "secret.txt" if link_at.endswith(".txt") else tmp_path
    os.symlink(target, ws.root / link_at)
    path = link_at if link_at.endswith(".txt") else f"{link_at}/secret.txt"
    for action in (lambda: ws.read(path), lambda: ws.write(path, "pwned")):
        with pytest.raises(PathRefused, match="symlink") as info:
            action()
        assert info.value.kind == "path_escape_attempt"
    assert (tmp_path / "secret.txt").read_text() == "outside"
    assert {"name": Path(link_at).name, "type": "symlink", "size": 0} in ws.list("code")[0]


def test_writes_only_under_code_and_reads_are_capped(ws: Workspace) -> None:
    with pytest.raises(PermissionError, match="only files under code/"):
        ws.write("config.yaml", "epochs: 1")
    (ws.root / "code" / "big.txt").write_bytes(b"a" * (MAX_READ_BYTES + 10))
    text, truncated, size = ws.read("code/big.txt")
    assert truncated and len(text) == MAX_READ_BYTES and size == MAX_READ_BYTES + 10
