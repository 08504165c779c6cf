"""Workspace paths: beneath the root, no symlinks followed, protected locations refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agents.workspace import MAX_READ_BYTES, NotRegular, PathRefused, Workspace


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


@pytest.mark.timeout(60)  # the attack was a hang: a FIFO opened without O_NONBLOCK waits for a writer
def test_a_fifo_or_a_device_is_refused_without_blocking(ws: Workspace) -> None:
    os.mkfifo(ws.root / "code" / "pipe.py")
    specials = ["code/pipe.py"]
    if os.geteuid() == 0:  # a device node, as ticket code with CAP_MKNOD could leave one
        os.mknod(ws.root / "code" / "zero.py", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
        specials.append("code/zero.py")
    for path in specials:
        with pytest.raises(NotRegular, match="not a regular file"):
            ws.read(path)
        with pytest.raises(NotRegular, match="not a regular file"):
            ws.write(path, "x = 1\n")
    assert {"name": "pipe.py", "type": "other", "size": 0} in ws.list("code")[0]
    assert stat.S_ISFIFO(os.stat(ws.root / "code" / "pipe.py").st_mode)  # left as it was


def test_a_fifo_swapped_in_after_the_check_is_refused_without_blocking(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window between the look at ``late.py`` (a regular file then) and its open: only the
    open's ``O_NONBLOCK`` keeps a reader from waiting for ever on the FIFO put there."""
    import threading

    target = ws.root / "code" / "late.py"
    target.write_text("x = 1\n")
    looked = os.stat

    def look_then_swap(name: object, *args: object, **kwargs: object) -> os.stat_result:
        info = looked(name, *args, **kwargs)  # type: ignore[arg-type]
        if name == "late.py" and not stat.S_ISFIFO(looked(target).st_mode):
            target.unlink()
            os.mkfifo(target)
        return info

    monkeypatch.setattr(os, "stat", look_then_swap)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            ws.read("code/late.py")
        except BaseException as exc:  # noqa: BLE001 - the test inspects what it was
            raised.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    blocked = reader.is_alive()
    if blocked:  # release the reader stuck on the FIFO, so the worker is not left with it
        os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
    assert not blocked, "the read blocked on a FIFO swapped in after the check"
    assert len(raised) == 1 and isinstance(raised[0], NotRegular), raised


def test_a_walk_is_bounded_in_depth_and_entries_without_recursion(ws: Workspace) -> None:
    from agents.workspace import MAX_WALK_DEPTH, TreeRefused, walk_files

    assert walk_files(ws, "code") == ["code/train.py"]
    deep = "code/" + "d/" * (sys.getrecursionlimit() + 100) + "x.py"  # past the recursion limit
    try:
        ws.write(deep, "x = 1\n")
        with pytest.raises(TreeRefused, match=f"more than MAX_WALK_DEPTH={MAX_WALK_DEPTH} folders"):
            walk_files(ws, "code")
    finally:  # rm walks any depth; shutil.rmtree (pytest's own clean-up) recurses and fails on it
        subprocess.run(["rm", "-rf", str(ws.root / "code" / "d")], check=True)


def test_a_listing_of_a_huge_folder_reads_a_bounded_number_of_entries(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agents.workspace as workspace

    monkeypatch.setattr(workspace, "MAX_SCAN_ENTRIES", 50)
    for i in range(120):
        (ws.root / "code" / f"f{i:03d}").touch()
    entries, truncated = ws.list("code")
    assert truncated and len(entries) == 50
