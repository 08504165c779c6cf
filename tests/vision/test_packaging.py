"""Packaging: one ONNX graph from trained members, exact against its reference, within the gate's
intake rules, scored by the host-side scorer as the members' averaged flipped probabilities."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from gate.intake import inspect_model
from runner import default_scorer
from synthetic.splits import read_split
from tests.vision._data import make_version
from vision.config import parse_config
from vision.holdout import held_out
from vision.packaging import PackageRefused, PackageSpec
from vision.packaging.__main__ import main as package_main
from vision.packaging._components import filter_small
from vision.packaging._members import load_members
from vision.packaging.build import build, package
from vision.train import train

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="the gate's intake runs confined by bwrap"
)
TINY: dict[str, object] = {  # a training config before validation (parse_config)
    "epochs": 1,
    "batch_size": 8,
    "threads": 1,
    "model": {"name": "unet-plain", "decoder_width": 8, "stages": 3},
    "optim": {"lr": 0.01},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_version(tmp_path_factory.mktemp("data") / "v1", n_train=96, n_dev=16, size=16)


@pytest.fixture(scope="module")
def members(data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("members")
    paths = []
    for seed in (1, 2):
        train(parse_config({**TINY, "seed": seed}), data, root / f"run{seed}")
        paths.append(root / f"{seed - 1}.onnx")
        shutil.copy(root / f"run{seed}" / "model.onnx", paths[-1])
    return paths


def member_prob(path: Path, images: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """One member on a flipped view, flipped back: (N, H, W)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    view = np.ascontiguousarray(np.flip(images[:, None], axis=axes))
    (prob,) = session.run(["prob"], {"image": view})
    return np.flip(prob, axis=axes)[:, 0]


def averaged(paths: list[Path], images: np.ndarray, views: list[tuple[int, ...]]) -> np.ndarray:
    return np.mean([member_prob(p, images, axes) for p in paths for axes in views], axis=0)


@needs_bwrap
def test_a_plain_package_scores_as_the_members_averaged_flipped_probabilities(
    members: list[Path], data: Path, tmp_path: Path
) -> None:
    spec = PackageSpec(flips=["h", "v"], thresholds=[0.5], min_sizes=[1])
    report = package(members, data, tmp_path / "out", spec)
    model = tmp_path / "out" / "model.onnx"
    assert report.choice.chosen.threshold == 0.5 and report.choice.chosen.min_size == 1
    inspect_model(model)  # the gate's own intake, confined: allowlisted ops, signature, sizes
    dev = read_split(data / "dev").images
    scored = default_scorer(model, dev)[:, 0]  # intake + the gate's confined scorer, as the runner scores
    expected = averaged(members, dev, [(), (3,), (2,)])
    assert np.abs(scored - expected).max() < 1e-5
    assert np.abs(scored - averaged(members, dev, [()])).max() > 1e-4  # the flips are really there
    written = json.loads((tmp_path / "out" / "result.json").read_text())
    assert [m["name"] for m in written["members"]] == ["0.onnx", "1.onnx"]


@needs_bwrap
@pytest.mark.parametrize(("threshold", "min_size"), [(0.55, 3), (0.6, 2), (0.8, 4)])
def test_a_chosen_threshold_and_size_are_folded_in_exactly(
    members: list[Path], data: Path, tmp_path: Path, threshold: float, min_size: int
) -> None:
    spec = PackageSpec(flips=["h"])
    model = build(load_members(members), spec, threshold, min_size)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    inspect_model(path)
    dev = read_split(data / "dev").images
    scored = default_scorer(path, dev)[:, 0]
    mean = averaged(members, dev, [(), (3,)]).astype(np.float32)
    on = mean >= np.float32(threshold)
    wanted = filter_small(on, min_size)
    assert wanted.any() and (on & ~wanted).any()  # the case keeps voids and removes small components
    assert np.array_equal(scored >= 0.5, wanted)  # the gate's fixed threshold sees the chosen decision
    kept = wanted.ravel()
    order = np.argsort(mean.ravel()[kept], kind="stable")
    assert np.all(np.diff(scored.ravel()[kept][order]) >= -1e-6)  # a monotone remap on what is kept


def snake(size: int) -> np.ndarray:
    """A one-pixel-wide spiral far longer than any window, plus diagonal-only contacts."""
    mask = np.zeros((size, size), dtype=bool)
    top, left, bottom, right = 0, 0, size - 1, size - 1
    while top <= bottom and left <= right:
        mask[top, left : right + 1] = True
        mask[top : bottom + 1, right] = True
        top, right = top + 2, right - 2
        if top <= bottom:
            mask[bottom, left : right + 1] = True
            mask[top : bottom + 1, left] = True
        bottom, left = bottom - 2, left + 2
    for k in range(0, size - 1, 3):
        mask[size - 1 - k, k] = True  # a diagonal chain: 8-connected, 4-disconnected
    return mask


@pytest.mark.parametrize("min_size", [2, 3, 4, 6])
def test_the_component_filter_equals_scipy_labelling(min_size: int) -> None:
    rng = np.random.default_rng(min_size)
    masks = [rng.random((12, 23, 31)) < density for density in (0.04, 0.15, 0.3, 0.5, 0.7)]
    masks.append(np.stack([snake(29), snake(29).T, np.ones((29, 29), bool), np.zeros((29, 29), bool)]))
    members_free = build_filter(min_size)
    for mask in masks:
        (got,) = members_free.run(["prob"], {"image": mask[:, None].astype(np.float32)})
        assert np.array_equal(got[:, 0] > 0.5, filter_small(mask, min_size)), f"density {mask.mean():.2f}"


def build_filter(min_size: int) -> Any:
    """The package's component filter alone, as a model: its input is the mask."""
    from onnx import TensorProto, helper

    from vision.packaging._components import keep_nodes

    keep, nodes, inits = keep_nodes("image", min_size)
    nodes.append(helper.make_node("Cast", [keep], ["prob"], to=TensorProto.FLOAT))
    dims: list[str | int | None] = ["N", 1, "H", "W"]
    graph = helper.make_graph(
        nodes,
        "filter",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, dims)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_the_choice_is_made_on_carved_training_images_and_never_on_dev(
    members: list[Path], data: Path, tmp_path: Path
) -> None:
    no_dev = tmp_path / "v"
    shutil.copytree(data / "train", no_dev / "train")  # dev is not even there
    report = package(members, no_dev, tmp_path / "out", PackageSpec(holdout_fraction=0.2, holdout_seed=3))
    rows = read_split(data / "train").image_meta
    assert report.choice.images == len(held_out([r["sha256"] for r in rows], 0.2, 3))
    assert report.mask_mismatch_pixels == 0
    chosen = report.choice.chosen
    assert chosen.object_f1 >= report.choice.untouched.object_f1


def restamped(path: Path, out: Path, *, opset: int | None = None, side: int | None = None) -> Path:
    model = onnx.load(str(path))
    if opset is not None:
        model.opset_import[0].version = opset
    if side is not None:
        for value in (model.graph.input[0], model.graph.output[0]):
            for dim in value.type.tensor_type.shape.dim[2:]:
                dim.dim_value = side
    out.write_bytes(model.SerializeToString())
    return out


@pytest.mark.parametrize(
    ("change", "match"),
    [({"side": 16}, "disagree on input size"), ({"opset": 18}, "disagree on opset")],
)
def test_members_that_disagree_are_refused_and_nothing_is_written(
    members: list[Path], data: Path, tmp_path: Path, change: dict[str, int], match: str
) -> None:
    odd = restamped(members[1], tmp_path / "1.onnx", **change)
    with pytest.raises(PackageRefused, match=match):
        package([members[0], odd], data, tmp_path / "out", PackageSpec())
    assert not (tmp_path / "out").exists()


def test_too_few_carved_images_is_refused(members: list[Path], tmp_path: Path) -> None:
    small = make_version(tmp_path / "small", n_train=20, n_dev=4, size=16)
    with pytest.raises(PackageRefused, match="carved split holds"):
        package(members, small, tmp_path / "out", PackageSpec())
    assert not (tmp_path / "out").exists()


def test_the_sandbox_entry_refuses_with_one_line(
    members: list[Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "members"
    folder.mkdir()
    shutil.copy(members[0], folder / "0.onnx")
    restamped(members[1], folder / "1.onnx", opset=18)
    (tmp_path / "spec.yaml").write_text("flips: [h]\n")
    argv = ["--members", str(folder), "--data", str(data), "--out", str(tmp_path / "out")]
    assert package_main([*argv, "--spec", str(tmp_path / "spec.yaml")]) == PackageRefused.exit_code
    assert "members disagree on opset" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
