"""The IDX reader and Fashion-MNIST part source; ``data generate`` through the real CLI."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segfactory.errors import DataError, UsageError
from synthetic import generate, make_params
from synthetic.idx import read_idx, write_idx
from synthetic.splits import read_split


def tiny_silhouettes(n: int = 4) -> np.ndarray:
    yy, xx = np.mgrid[0:28, 0:28]
    out = np.zeros((n, 28, 28), np.uint8)
    for k in range(n):
        inside = ((yy - 14) / (8 + k)) ** 2 + ((xx - 14) / (11 - k)) ** 2 < 1
        out[k][inside] = 160 + 20 * k
    return out


def test_idx_round_trip_plain_and_gzip(tmp_path: Path) -> None:
    data = tiny_silhouettes()
    write_idx(tmp_path / "x-idx3-ubyte", data)
    assert np.array_equal(read_idx(tmp_path / "x-idx3-ubyte"), data)
    (tmp_path / "x.gz").write_bytes(gzip.compress((tmp_path / "x-idx3-ubyte").read_bytes()))
    assert np.array_equal(read_idx(tmp_path / "x.gz"), data)
    raw = (tmp_path / "x-idx3-ubyte").read_bytes()
    assert raw[:4] == bytes([0, 0, 8, 3]) and int.from_bytes(raw[4:8], "big") == 4


def test_idx_errors(tmp_path: Path) -> None:
    write_idx(tmp_path / "ok", tiny_silhouettes())
    (tmp_path / "short").write_bytes((tmp_path / "ok").read_bytes()[:-10])
    (tmp_path / "html").write_text("<html>not found</html>")
    with pytest.raises(DataError, match="truncated"):
        read_idx(tmp_path / "short")
    with pytest.raises(DataError, match="not an IDX"):
        read_idx(tmp_path / "html")
    with pytest.raises(UsageError, match="not found"):
        read_idx(tmp_path / "missing")


def test_fashion_mnist_part_source(tmp_path: Path) -> None:
    write_idx(tmp_path / "fm", tiny_silhouettes())
    drawn = generate(
        10, 32, 3, make_params(part_source="fashion-mnist", idx_path=str(tmp_path / "fm")), workers=1
    )
    assert {m["part"] for m in drawn.image_meta} == {"fashion-mnist"}
    corner, centre = drawn.images[:, 0, 0].mean(), drawn.images[:, 14:18, 14:18].mean()
    assert centre < corner  # metal in the middle attenuates; open beam at the corners


def test_cli_generate_writes_a_split(tmp_path: Path, cli: Callable[..., Any]) -> None:
    result = cli(
        "data",
        "generate",
        "--out",
        str(tmp_path / "s"),
        "--n",
        "8",
        "--size",
        "32",
        "--seed",
        "7",
        "--param",
        "contrast_min=0.1",
        "--param",
        "backgrounds=flat,gradient",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    split = read_split(tmp_path / "s")
    assert summary["count"] == 8 and len(split) == 8 and split.manifest["seed"] == "public:7"
    assert split.manifest["params"]["contrast_min"] == 0.1
    again = cli("data", "generate", "--out", str(tmp_path / "s"), "--n", "8", "--size", "32", "--seed", "7")
    assert again.returncode != 0 and "already exists" in again.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--n", "4", "--size", "-32"], "size"),
        (["--n", "0", "--size", "32"], "n must be"),
        (["--n", "4", "--size", "32", "--param", "contrast_max=1.4"], "contrast_max"),
        (["--n", "4", "--size", "32", "--part-source", "voxels"], "unknown part source"),
        (
            ["--n", "4", "--size", "32", "--part-source", "fashion-mnist", "--idx", "/nonexistent/idx"],
            "not found",
        ),
        (["--n", "4", "--size", "32", "--param", "wobble=3"], "not a generator parameter"),
    ],
)
def test_cli_bad_input_is_one_line_and_non_zero(
    args: list[str], needle: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    result = cli("data", "generate", "--out", str(tmp_path / "x"), "--seed", "1", *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("segfactory: error:") and needle in lines[0]
    assert not (tmp_path / "x").exists()
