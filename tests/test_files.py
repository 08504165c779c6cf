"""Files and folders that nobody sees half-written: ``segfactory.files``."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from segfactory.files import remove_tree, staged_dir, write_atomic


def test_write_atomic_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    write_atomic(path, '{"new": 1}')
    assert path.read_text() == '{"new": 1}' and os.listdir(tmp_path) == ["state.json"]
    write_atomic(path, b"\x00bytes", mode=0o640)
    assert path.read_bytes() == b"\x00bytes" and (path.stat().st_mode & 0o777) == 0o640


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")

    class Unwritable:  # neither str nor bytes: the write itself fails, after the temp file exists
        pass

    with pytest.raises(TypeError):
        write_atomic(path, Unwritable())  # type: ignore[arg-type]
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["state.json"]


def test_write_atomic_does_not_write_through_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path = tmp_path / "state.json"
    path.symlink_to(victim)  # the final name is replaced, never followed
    write_atomic(path, "new")
    assert victim.read_text() == "keep" and not path.is_symlink() and path.read_text() == "new"


def test_concurrent_writers_never_share_a_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    errors: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for _ in range(50):
                write_atomic(path, str(k) * 1000)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = path.read_text()
    assert not errors and len(set(text)) == 1 and len(text) == 1000
    assert os.listdir(tmp_path) == ["cache.json"]


def test_staged_dir_renames_on_success_and_cleans_up_on_error(tmp_path: Path) -> None:
    target = tmp_path / "split"
    with staged_dir(target) as tmp:
        (tmp / "a").write_text("1")
    assert (target / "a").read_text() == "1"
    with pytest.raises(RuntimeError), staged_dir(tmp_path / "other") as tmp:
        (tmp / "a").write_text("1")
        raise RuntimeError("half-way")
    assert sorted(os.listdir(tmp_path)) == ["split"]


def test_remove_tree_goes_any_depth_and_follows_no_link(tmp_path: Path) -> None:
    """A tree nested past Python's recursion limit (``shutil.rmtree`` raises RecursionError there,
    which ends its caller) is removed; a link inside it is removed, never what it names."""
    import os
    import shutil
    import sys

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "tree"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:  # relative mkdirs: the path grows past PATH_MAX long before the depth does
        for _ in range(sys.getrecursionlimit() + 500):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.symlink(outside, "link", dir_fd=fd)
    finally:
        os.close(fd)
    with pytest.raises(RecursionError):
        shutil.rmtree(tree, onerror=lambda *_: None)
    assert remove_tree(tree) == [] and not tree.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    assert remove_tree(tmp_path / "never-there") == []
