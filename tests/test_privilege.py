"""What root does with trees and interpreters that others can influence: a chown walk that never
follows a link (not at its top, not below, not when a directory is swapped for a link while it
runs, not through a hard link), and a Python started isolated from the caller's directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from segfactory import privilege
from segfactory.privilege import SAFE_CWD, OwnershipError, chown_tree, isolated_python
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
TARGET = (4321, 4321)  # a user that owns nothing on this machine


def _owner(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory with a file that the walk must never reach (root's, like /etc)."""
    target = tmp_path / "outside"
    target.mkdir()
    (target / "shadow").write_text("secret")
    return target


def test_the_walk_gives_the_tree_and_follows_no_link(tmp_path: Path, outside: Path) -> None:
    tree = tmp_path / "runs"
    (tree / "r1" / "tickets").mkdir(parents=True)
    (tree / "r1" / "tickets" / "outcome.json").write_text("{}")
    (tree / "etc").symlink_to(outside)  # a symlinked directory: ``runs/etc -> /etc``
    (tree / "r1" / "shadow").symlink_to(outside / "shadow")
    os.mkfifo(tree / "r1" / "fifo")  # must not hang the walk
    chown_tree(tree, *TARGET)
    assert {_owner(p) for p in [tree, *tree.rglob("*")] if not p.is_symlink()} == {TARGET}
    assert _owner(outside) == (0, 0) and _owner(outside / "shadow") == (0, 0)
    assert _owner(tree / "etc") == (0, 0)  # the link itself is left alone too


def test_a_top_that_is_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "runs").symlink_to(outside)
    with pytest.raises(OwnershipError, match="is a link or not a directory"):
        chown_tree(tmp_path / "runs", *TARGET)
    assert _owner(outside) == (0, 0)


def test_a_directory_swapped_for_a_link_mid_walk_is_not_followed(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a sandbox could run: the walk lists ``work/``, then ``work/out`` becomes a link."""
    tree = tmp_path / "work"
    (tree / "out").mkdir(parents=True)
    (tree / "out" / "model.onnx").write_text("x")
    listed = privilege._entries

    def then_swap(dir_fd: int) -> list[str]:
        names = listed(dir_fd)
        if "out" in names and (tree / "out").is_dir() and not (tree / "out").is_symlink():
            os.rename(tree / "out", tmp_path / "moved")
            (tree / "out").symlink_to(outside)
        return names

    monkeypatch.setattr(privilege, "_entries", then_swap)
    chown_tree(tree, *TARGET)
    assert (tree / "out").is_symlink()  # the swap happened between the listing and the descent
    assert _owner(outside) == (0, 0) and _owner(outside / "shadow") == (0, 0)
    assert _owner(tree) == TARGET


def test_an_entry_swapped_for_a_link_between_its_lstat_and_its_open_is_not_followed(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrowest window: the walk has seen a directory and a file as what they are, and each
    becomes a link just before it is opened; only ``O_NOFOLLOW`` on that open stops the walk."""
    tree = tmp_path / "work"
    (tree / "out").mkdir(parents=True)
    (tree / "model.onnx").write_text("x")
    targets = {"out": outside, "model.onnx": outside / "shadow"}
    opening = privilege._open_child

    def swap_then_open(dir_fd: int, name: str, flags: int) -> int | None:
        if name in targets and not (tree / name).is_symlink():
            os.rename(tree / name, tmp_path / f"moved-{name}")
            (tree / name).symlink_to(targets[name])
        return opening(dir_fd, name, flags)

    monkeypatch.setattr(privilege, "_open_child", swap_then_open)
    chown_tree(tree, *TARGET)
    assert (tree / "out").is_symlink() and (tree / "model.onnx").is_symlink()  # both swapped
    assert _owner(outside) == (0, 0) and _owner(outside / "shadow") == (0, 0)
    assert _owner(tree) == TARGET


def test_a_hard_link_to_a_file_outside_is_not_given_away(tmp_path: Path, outside: Path) -> None:
    tree = tmp_path / "datasets"
    tree.mkdir()
    os.link(outside / "shadow", tree / "shadow")
    (tree / "own.json").write_text("{}")
    chown_tree(tree, *TARGET)
    assert _owner(outside / "shadow") == (0, 0)
    assert _owner(tree / "own.json") == TARGET


def test_a_tree_deeper_than_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep"
    path.mkdir()
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(privilege.MAX_DEPTH + 2):  # relative to a descriptor: no path grows too long
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    with pytest.raises(OwnershipError, match="MAX_DEPTH"):
        chown_tree(path, *TARGET)


def test_isolated_python_imports_no_module_from_its_directory_or_pythonpath(tmp_path: Path) -> None:
    """A third-party name the source tree does not shadow (``typer``, which the CLI imports),
    planted where Python starts and on ``PYTHONPATH``: neither copy is imported, because the
    interpreter runs isolated (``-I``), not because the tree comes first."""
    planted = tmp_path / "planted"
    (planted / "typer").mkdir(parents=True)
    marker = tmp_path / "imported"
    (planted / "typer" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    env = {**os.environ, "PYTHONPATH": str(planted)}
    for cwd in (planted, Path(SAFE_CWD)):
        argv = isolated_python(REPO, "segfactory", "--help")
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "segfactory" in done.stdout, done.stderr[-500:]
    assert not marker.exists()


def test_isolated_python_imports_nothing_from_its_directory(tmp_path: Path) -> None:
    """A ``segfactory`` package planted in the directory Python starts in is not imported: the
    code comes from the tree given, whatever ``PYTHONPATH`` says."""
    planted = tmp_path / "planted"
    (planted / "segfactory").mkdir(parents=True)
    marker = tmp_path / "imported"
    (planted / "segfactory" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('root')\n")
    (planted / "segfactory" / "__main__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(planted)}
    argv = isolated_python(REPO, "segfactory", "--help")
    done = subprocess.run(argv, cwd=planted, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert "segfactory" in done.stdout and not marker.exists()
    plain = subprocess.run(  # the way it used to start: the planted package runs
        [argv[0], "-m", "segfactory", "--help"], cwd=planted, capture_output=True, timeout=120
    )
    assert marker.exists(), plain.stderr[-500:]
