"""``segfactory evaluate``: every metric through onnxruntime on ``model.onnx``.

The report holds pooled metrics, recall by size bin, bootstrap intervals over images, per-image
values, the worst slice, optionally a paired comparison against a second model and the
robustness suite (one cell per perturbation and severity, marked ``within_training_range``).
The split's files are checked against its manifest's hashes before anything is scored, and
the set's intensity, contrast and noise are put against the model's training data
(``training_range``; zero detections on a set outside it are reported as a shift).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from segfactory.errors import DataError
from segfactory.records import Result
from segfactory.stats import DEFAULT_N_BOOT, Interval, bootstrap_ci, paired_bootstrap_diff
from synthetic.check import require_intact
from synthetic.intensity import split_stats
from vision.config import AugmentConfig, parse_config
from vision.data import load_eval_split
from vision.metrics import (
    DEFAULT_IOU_MATCH,
    DEFAULT_MIN_SUPPORT,
    DEFAULT_THRESHOLD,
    PerImage,
    aggregate,
    object_f1,
    object_recall,
    per_image_metrics,
    pixel_iou_micro,
)
from vision.onnx_infer import open_session, predict
from vision.perturb import PERTURBATIONS, SEVERITIES, perturb, within_training_range
from vision.slices import SliceReport, worst_slice
from vision.training_data import TrainingRange, collapse_finding, training_range

COLLAPSE_DROP = 0.2  # an object-F1 drop (absolute) from clean that counts as a collapse
PER_IMAGE = ("object_tp", "object_fp", "object_fn", "pixel_iou", "dice", "boundary_iou")


class Comparison(Result):
    """A paired bootstrap of this model's object F1 minus a reference model's, over the same images."""

    reference_model: str
    metric: Literal["object_f1"]
    reference: float
    candidate: float
    diff: Interval
    excludes_zero: bool
    reference_metrics: dict[str, float]


class RobustnessCell(Result):
    """One perturbation at one severity: the scores, the drop from clean, and what it means."""

    perturbation: str
    severity: int
    value: int | float  # the perturbation's strength at this severity (shift: whole pixels)
    within_training_range: bool
    object_f1: float
    object_recall: float
    pixel_iou: float
    object_f1_drop: float
    finding: Literal["ok", "vulnerability", "extrapolation"]


class Robustness(Result):
    training_config_found: bool  # the model's config.yaml gave its augmentation ranges
    collapse_drop: float
    cells: list[RobustnessCell]


class EvalReport(Result):
    """What ``segfactory evaluate`` reports. ``comparison`` and ``robustness`` are present only
    when asked for."""

    model: str
    data: str
    threshold: float
    iou_match: float
    metrics: dict[str, float]  # vision.metrics.aggregate: pooled and per-image-mean scores
    intervals: dict[str, Interval]  # bootstrap over images, per headline metric
    worst_slice: SliceReport
    per_image: dict[str, list[int] | list[float]]  # PER_IMAGE values, one per image in split order
    training_range: TrainingRange
    outside_training_range: bool | None  # None: the training range is not known
    comparison: Comparison | None = None
    robustness: Robustness | None = None


def resolve_model(path: Path) -> Path:
    """``M`` may be a model.onnx file or a run folder holding one."""
    onnx_path = path / "model.onnx" if path.is_dir() else path
    if not onnx_path.is_file():
        raise DataError(f"no model at {path}: expected a model.onnx file or a run folder holding one")
    return onnx_path


def training_augment(onnx_path: Path) -> AugmentConfig | None:
    """The augmentation ranges of the run that produced the model (its config.yaml), if known."""
    cfg = onnx_path.parent / "config.yaml"
    if not cfg.is_file():
        return None
    return parse_config(yaml.safe_load(cfg.read_text()), str(cfg)).augment


def intervals(m: PerImage, n_boot: int, seed: int) -> dict[str, Interval]:
    """Bootstrap intervals over images for the headline metrics."""
    return {
        "object_f1": bootstrap_ci(
            (m.object_tp, m.object_fp, m.object_fn), object_f1, n_boot=n_boot, seed=seed
        ),
        "object_recall": bootstrap_ci((m.object_tp, m.object_fn), object_recall, n_boot=n_boot, seed=seed),
        "pixel_iou": bootstrap_ci(
            (m.pixel_tp, m.pixel_fp, m.pixel_fn), pixel_iou_micro, n_boot=n_boot, seed=seed
        ),
        "boundary_iou": bootstrap_ci(m.boundary_iou, n_boot=n_boot, seed=seed),
    }


def compare(ref_path: Path, ref: PerImage, cand: PerImage, n_boot: int, seed: int) -> Comparison:
    """Paired bootstrap of candidate minus reference object F1 over the same images."""
    diff = paired_bootstrap_diff(
        (ref.object_tp, ref.object_fp, ref.object_fn),
        (cand.object_tp, cand.object_fp, cand.object_fn),
        object_f1,
        n_boot=n_boot,
        seed=seed,
    )
    return Comparison(
        reference_model=str(ref_path),
        metric="object_f1",
        reference=object_f1((ref.object_tp, ref.object_fp, ref.object_fn)),
        candidate=object_f1((cand.object_tp, cand.object_fp, cand.object_fn)),
        diff=diff,
        excludes_zero=bool(diff.low > 0 or diff.high < 0),
        reference_metrics=aggregate(ref),
    )


def robustness(
    session: Any,
    images: np.ndarray,
    masks: np.ndarray,
    clean: dict[str, float],
    augment: AugmentConfig | None,
    seed: int,
    threshold: float,
    iou_match: float,
) -> list[RobustnessCell]:
    """One cell per perturbation and severity."""
    cells = []
    for name, p in PERTURBATIONS.items():
        for sev in SEVERITIES:
            x, y = perturb(name, sev, images, masks, seed)
            agg = aggregate(
                per_image_metrics(
                    predict("", x, session=session), y, threshold=threshold, iou_match=iou_match
                )
            )
            inside = within_training_range(p, p.values[sev - 1], augment)
            drop = clean["object_f1"] - agg["object_f1"]
            verdict = "ok" if drop < COLLAPSE_DROP else ("vulnerability" if inside else "extrapolation")
            cells.append(
                RobustnessCell(
                    perturbation=name,
                    severity=sev,
                    value=p.values[sev - 1],
                    within_training_range=inside,
                    object_f1=agg["object_f1"],
                    object_recall=agg["object_recall"],
                    pixel_iou=agg["pixel_iou"],
                    object_f1_drop=drop,
                    finding=verdict,
                )
            )
    return cells


def evaluate(
    model: Path,
    data: Path,
    *,
    with_robustness: bool = False,
    compare_to: Path | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    iou_match: float = DEFAULT_IOU_MATCH,
    seed: int = 0,
    n_boot: int = DEFAULT_N_BOOT,
    min_support: int = DEFAULT_MIN_SUPPORT,
    train_data: Path | str | None = None,
    home_root: Path | None = None,
) -> EvalReport:
    """The full evaluation report; DataError when the split's files were changed.

    ``train_data`` names the model's training data when nothing beside the model records it
    (see ``vision.training_data``); ``home_root`` resolves a ``NAME/vK`` reference.
    """
    onnx_path = resolve_model(model)
    split = load_eval_split(data)
    assert split.path is not None
    require_intact(split.path)
    images, masks = np.asarray(split.images), np.asarray(split.masks)
    session = open_session(onnx_path)
    per = per_image_metrics(
        predict(onnx_path, images, session=session), masks, threshold=threshold, iou_match=iou_match
    )
    metrics = aggregate(per)
    block = training_range(split_stats(split), onnx_path, train_data, home_root)
    extra: dict[str, Comparison | Robustness] = {}  # set only when asked for: absent otherwise
    if compare_to is not None:
        ref_path = resolve_model(compare_to)
        ref = per_image_metrics(predict(ref_path, images), masks, threshold=threshold, iou_match=iou_match)
        extra["comparison"] = compare(ref_path, ref, per, n_boot, seed)
    if with_robustness:
        augment = training_augment(onnx_path)
        extra["robustness"] = Robustness(
            training_config_found=augment is not None,
            collapse_drop=COLLAPSE_DROP,
            cells=robustness(session, images, masks, metrics, augment, seed, threshold, iou_match),
        )
    return EvalReport(
        model=str(onnx_path),
        data=str(split.path),
        threshold=threshold,
        iou_match=iou_match,
        metrics=metrics,
        intervals=intervals(per, n_boot, seed),
        worst_slice=worst_slice(per, split.image_meta, split.defects, min_support),
        per_image={k: getattr(per, k).tolist() for k in PER_IMAGE},
        training_range=collapse_finding(
            block,
            int(per.object_tp.sum() + per.object_fp.sum()),
            int(per.object_tp.sum() + per.object_fn.sum()),
        ),
        outside_training_range=block.outside,
        **extra,
    )
