"""Copy-out refuses whatever sandboxed code could plant in /work to reach or hang the host."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from runner import UnsafeArtifact, copy_out, read_beneath
from segfactory.errors import LimitExceeded


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work" / "out").mkdir(parents=True)
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text("host secret\n")
    return tmp_path / "work"


def test_regular_file_is_copied_with_its_hash(work: Path, tmp_path: Path) -> None:
    data = os.urandom(3 * 2**20 + 7)
    (work / "out" / "model.onnx").write_bytes(data)
    copied = copy_out(work, "out/model.onnx", tmp_path / "model.onnx")
    assert copied.size == len(data)
    assert copied.sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "model.onnx").read_bytes() == data


def test_symlink_to_host_file_is_refused(work: Path, tmp_path: Path) -> None:
    (work / "out" / "model.onnx").symlink_to(tmp_path / "host" / "secret.txt")
    with pytest.raises(UnsafeArtifact, match="symlink"):
        copy_out(work, "out/model.onnx", tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_symlinked_directory_component_is_refused(work: Path, tmp_path: Path) -> None:
    (work / "out").rmdir()
    (work / "out").symlink_to(tmp_path / "host")
    (tmp_path / "host" / "model.onnx").write_bytes(b"host file")
    with pytest.raises(UnsafeArtifact, match="symlink or not a directory"):
        copy_out(work, "out/model.onnx", tmp_path / "model.onnx")


def test_fifo_is_refused_without_blocking(work: Path, tmp_path: Path) -> None:
    os.mkfifo(work / "out" / "model.onnx")
    result: list[BaseException] = []

    def attempt() -> None:
        try:
            copy_out(work, "out/model.onnx", tmp_path / "model.onnx")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            result.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "opening the FIFO blocked"
    assert isinstance(result[0], UnsafeArtifact)


def test_hard_link_is_refused(work: Path, tmp_path: Path) -> None:
    os.link(tmp_path / "host" / "secret.txt", work / "out" / "model.onnx")
    with pytest.raises(UnsafeArtifact, match="hard links"):
        copy_out(work, "out/model.onnx", tmp_path / "model.onnx")


@pytest.mark.parametrize("name", ["../host/secret.txt", "/etc/passwd", "out/../../host/secret.txt", ""])
def test_escaping_names_are_refused_before_any_open(work: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafeArtifact, match="only plain relative names"):
        copy_out(work, name, tmp_path / "model.onnx")


def test_oversized_file_fails_loudly_and_leaves_nothing(work: Path, tmp_path: Path) -> None:
    (work / "out" / "model.onnx").write_bytes(b"x" * 2048)
    with pytest.raises(LimitExceeded, match="cap of 1024 bytes"):
        copy_out(work, "out/model.onnx", tmp_path / "model.onnx", cap=1024)
    assert not (tmp_path / "model.onnx").exists()


def test_read_beneath_flags_truncation(work: Path) -> None:
    (work / "out" / "result.json").write_bytes(b"y" * 100)
    assert read_beneath(work, "out/result.json", cap=10) == (b"y" * 10, True)
    assert read_beneath(work, "out/result.json", cap=100) == (b"y" * 100, False)
