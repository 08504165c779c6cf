"""``package(members, data, out, spec)``: one ONNX model from trained members, choosing on train.

Imports onnx and onnxruntime: the packaging sandbox's code, never the runner's host process.

Order: read and check the members (``_members``: they must agree, else nothing is written);
build the ensemble with its flipped views (``_graph``); score it on the images carved from the
train split (``vision.holdout``; the dev split is not even mounted); choose the threshold and
the minimum component size there (``_choose``); fold both into the graph; check on the same
images that the packaged graph decides every pixel exactly as the chosen post-processing does;
and only then write ``model.onnx`` and ``result.json``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import onnx
from pydantic import BaseModel, ConfigDict

from segfactory.errors import DataError
from synthetic.splits import read_split
from vision.holdout import held_out
from vision.onnx_infer import OUTPUT_NAME, predict
from vision.packaging._choose import Choice, choose
from vision.packaging._components import filter_small
from vision.packaging._graph import assemble, ensemble_nodes, postprocess_nodes
from vision.packaging._members import Member, load_members
from vision.packaging.spec import MAX_PACKAGE_BYTES, MIN_CHOICE_IMAGES, PackageRefused, PackageSpec
from vision.result import ONNX_FILE, RESULT_FILE

log = logging.getLogger(__name__)


class PackageReport(BaseModel):
    """``result.json`` of a packaging run: the sandbox's own account (the host recomputes evidence)."""

    model_config = ConfigDict(extra="forbid")

    usable: bool
    members: list[dict[str, str]]  # name, sha256: what was averaged
    views: list[str]
    choice: Choice
    mask_mismatch_pixels: int  # packaged graph against the chosen post-processing, carved images
    max_abs_diff: float  # packaged graph against the plain average where no post-processing applies
    nodes: int
    bytes: int
    timings: dict[str, float] = {}


def _session(model: onnx.ModelProto) -> object:
    import onnxruntime as ort  # deferred: only the packaging run needs it

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
    )


def carved_split(data_dir: Path, spec: PackageSpec) -> tuple[np.ndarray, np.ndarray]:
    """The carved train images and masks the choice is made on (dev is never read)."""
    train = read_split(data_dir / "train", mmap=True)
    index = held_out(
        [str(row["sha256"]) for row in train.image_meta], spec.holdout_fraction, spec.holdout_seed
    )
    if len(index) < MIN_CHOICE_IMAGES:
        raise PackageRefused(
            f"the carved split holds {len(index)} of {len(train)} training images "
            f"(holdout_fraction {spec.holdout_fraction:g}); choosing needs at least {MIN_CHOICE_IMAGES}"
        )
    return np.ascontiguousarray(train.images[index]), np.ascontiguousarray(train.masks[index])


def build(members: list[Member], spec: PackageSpec, threshold: float, min_size: int) -> onnx.ModelProto:
    """The packaged model; with ``threshold`` g and ``min_size`` 1 it is the plain average."""
    nodes, inits, prob = ensemble_nodes(members, list(spec.flips))
    if threshold != spec.gate_threshold or min_size > 1:
        more, consts = postprocess_nodes(prob, threshold, min_size, spec.gate_threshold)
        nodes, inits, prob = [*nodes, *more], [*inits, *consts], OUTPUT_NAME
    return assemble(nodes, inits, prob, members[0].opset, max(m.ir_version for m in members))


def _check_packaged(
    model: onnx.ModelProto, images: np.ndarray, averaged: np.ndarray, spec: PackageSpec, choice: Choice
) -> tuple[int, float]:
    """(pixels the packaged graph decides otherwise than the chosen post-processing, largest
    difference from the plain average on pixels no post-processing touched)."""
    got = predict("packaged", images, session=_session(model))
    t, m = choice.chosen.threshold, choice.chosen.min_size
    wanted = filter_small(averaged >= np.float32(t), m)
    mismatch = int(((got >= np.float32(spec.gate_threshold)) != wanted).sum())
    plain = t == spec.gate_threshold and m == 1
    return mismatch, float(np.abs(got - averaged).max()) if plain else 0.0


def package(member_paths: list[Path], data_dir: Path, out_dir: Path, spec: PackageSpec) -> PackageReport:
    """Package ``member_paths`` into ``out_dir/model.onnx``; raises PackageRefused (nothing written)."""
    t0 = time.perf_counter()
    members = load_members(member_paths)
    images, masks = carved_split(data_dir, spec)
    plain = build(members, spec, spec.gate_threshold, 1)
    averaged = predict("ensemble", images, session=_session(plain))
    t1 = time.perf_counter()
    choice = choose(
        averaged, masks, spec.thresholds, spec.min_sizes, spec.gate_threshold, spec.max_slice_drop
    )
    t2 = time.perf_counter()
    model = build(members, spec, choice.chosen.threshold, choice.chosen.min_size)
    data = model.SerializeToString()
    if len(data) > MAX_PACKAGE_BYTES:
        raise PackageRefused(
            f"the packaged model is {len(data)} bytes, over MAX_PACKAGE_BYTES={MAX_PACKAGE_BYTES}"
        )
    mismatch, diff = _check_packaged(model, images, averaged, spec, choice)
    if mismatch:
        raise DataError(
            f"the packaged graph decides {mismatch} carved pixels otherwise than its post-processing"
        )
    report = PackageReport(
        usable=True,
        members=[{"name": m.name, "sha256": m.sha256} for m in members],
        views=["image", *spec.flips],
        choice=choice,
        mask_mismatch_pixels=mismatch,
        max_abs_diff=diff,
        nodes=len(model.graph.node),
        bytes=len(data),
        timings={"ensemble_s": t1 - t0, "choice_s": t2 - t1, "build_check_s": time.perf_counter() - t2},
    )
    out_dir.mkdir(parents=True, exist_ok=False)
    (out_dir / ONNX_FILE).write_bytes(data)
    (out_dir / RESULT_FILE).write_text(report.model_dump_json(indent=2) + "\n")
    log.info(
        "packaged %d members, views %s: threshold %.2f, min size %d, carved object F1 %.4f (untouched %.4f)",
        len(members),
        report.views,
        choice.chosen.threshold,
        choice.chosen.min_size,
        choice.chosen.object_f1,
        choice.untouched.object_f1,
    )
    return report


__all__ = ["PackageReport", "build", "carved_split", "package"]
