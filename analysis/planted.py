"""Planted causes: check that the analysis names a weakness we put there on purpose.

Each run draws a cause at random (or none): remove a void-size or contrast range from
training, corrupt a share of the training masks, shrink the model, or drop a background type,
each with a random magnitude. The candidate is trained on the planted data; the analysis runs
relative to an unplanted reference model, so weak slices every model has do not count. A
planted run is *recovered* when the top recommendation names the cause; a null run must yield
no finding above threshold (its top recommendation is "leave it").

Training is behind the ``Trainer``/``Predictor`` protocols, so any learner plugs in: the
numpy ``analysis.toy.HistogramTrainer`` in the fast tests, a vision model elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from analysis.report import AnalysisReport, Evaluated, Extras, SplitLike, analyse
from segfactory.stats import Interval, wilson_interval
from synthetic.splits import ImageMeta
from vision.onnx_infer import predict

CauseKind = Literal["none", "placebo", "size", "contrast", "masks", "capacity", "background"]
NULL_KINDS = ("none", "placebo")  # null runs: nothing planted, or a random share of images removed
CAUSES: tuple[CauseKind, ...] = ("size", "contrast", "masks", "capacity", "background")
NULL_SHARE = 0.25  # share of randomly drawn runs that plant nothing
SIZE_QUANTILES = (0.15, 0.3)  # images with voids in this top share of sizes (drawn) are removed
CONTRAST_QUANTILES_NOTE = "images with voids in the bottom share of contrast (drawn) are removed"
CONTRAST_QUANTILES = (0.15, 0.3)
MASK_SHARES = (0.4, 0.7)  # share of training masks with voids that are erased
CAPACITY_SHARES = (0.3, 0.5)  # the shrunk model keeps this share of its capacity
PLACEBO_SHARES = (0.15, 0.3)  # a placebo null run removes this share of training images, at random
ACTION_CAUSE = {"label_fix": "masks", "curation": "masks", "model_change": "capacity", "leave_it": "none"}


class Predictor(Protocol):
    """A trained model: (N, H, W) images in [0, 1] -> (N, H, W) void probabilities."""

    def predict(self, images: np.ndarray) -> np.ndarray: ...


class Trainer(Protocol):
    """Trains a Predictor; ``capacity`` in (0, 1] scales model size, 1.0 being the reference."""

    def fit(
        self, images: np.ndarray, masks: np.ndarray, *, capacity: float = 1.0, seed: int = 0
    ) -> Predictor: ...


@dataclass(frozen=True)
class OnnxPredictor:
    """A ``Predictor`` over an exported model (the model contract), run by onnxruntime."""

    path: Path

    def predict(self, images: np.ndarray) -> np.ndarray:
        return predict(self.path, np.ascontiguousarray(images, dtype=np.float32))


class PlantedCause(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: CauseKind
    magnitude: float  # the drawn quantile, share or capacity (0 for none)
    detail: dict[str, float | int | str] = {}  # what was removed, erased or kept, by name


@dataclass
class Planted:
    """What the candidate trains on: a split-like view of the planted training data."""

    images: np.ndarray
    masks: np.ndarray
    capacity: float
    cause: PlantedCause
    image_meta: list[ImageMeta]
    defects: list[dict[str, Any]]  # defects.jsonl rows, typed as synthetic.splits.Split holds them


Ranges = dict[str, tuple[float, float]]
RANGES: Ranges = {
    "size": SIZE_QUANTILES,
    "contrast": CONTRAST_QUANTILES,
    "masks": MASK_SHARES,
    "capacity": CAPACITY_SHARES,
    "background": (0.0, 1.0),  # background: picks the type dropped
    "placebo": PLACEBO_SHARES,
}


def draw_cause(
    rng: np.random.Generator, kind: CauseKind | None = None, ranges: Ranges | None = None
) -> PlantedCause:
    """A random cause (or the given kind) with a magnitude drawn uniformly from its range."""
    if kind is None:
        kind = "none" if rng.random() < NULL_SHARE else CAUSES[int(rng.integers(len(CAUSES)))]
    ranges = ranges or RANGES
    magnitude = 0.0 if kind == "none" else float(rng.uniform(*ranges[kind]))
    return PlantedCause(kind=kind, magnitude=round(magnitude, 4))


def _images_with(train: SplitLike, key: str, below: float, sign: float) -> np.ndarray:
    """Images holding a void whose ``sign * key`` lies below ``below``."""
    index = {str(m.get("id")): k for k, m in enumerate(train.image_meta)}
    hit = np.zeros(len(train.image_meta), dtype=bool)
    for d in train.defects:
        value = d.get(key)
        if isinstance(value, int | float) and sign * value < below and str(d.get("image_id")) in index:
            hit[index[str(d.get("image_id"))]] = True
    return hit


def plant(cause: PlantedCause, train: SplitLike, rng: np.random.Generator) -> Planted:
    """Apply ``cause`` to the training split; returns what the candidate trains on."""
    images, masks, capacity = train.images, train.masks, 1.0
    keep = np.ones(len(train.image_meta), dtype=bool)
    detail: dict[str, float | int | str] = {}
    if cause.kind in ("size", "contrast"):
        # the largest voids, or the faintest: the ranges a model most plainly learns from examples
        key, sign = ("area", -1.0) if cause.kind == "size" else ("contrast", 1.0)
        values = [sign * float(d[key]) for d in train.defects if isinstance(d.get(key), int | float)]
        cut = float(np.quantile(values, cause.magnitude))
        keep = ~_images_with(train, key, cut, sign)
        images, masks = images[keep], masks[keep]
        detail = {
            key + (" below" if sign > 0 else " above"): sign * cut,
            "images_removed": int((~keep).sum()),
        }
    elif cause.kind == "background":
        kinds = sorted({str(m.get("background")) for m in train.image_meta})
        gone = kinds[int(cause.magnitude * len(kinds)) % len(kinds)]
        keep = np.array([str(m.get("background")) != gone for m in train.image_meta])
        images, masks, detail = images[keep], masks[keep], {"background_removed": gone}
    elif cause.kind == "masks":
        with_voids = np.flatnonzero(masks.reshape(masks.shape[0], -1).any(axis=1))
        hit = rng.choice(with_voids, int(round(cause.magnitude * with_voids.size)), replace=False)
        masks = masks.copy()
        masks[hit] = 0
        detail = {"masks_erased": int(hit.size)}
    elif cause.kind == "capacity":
        capacity, detail = cause.magnitude, {"capacity": cause.magnitude}
    elif cause.kind == "placebo":  # a data change that plants no cause: any slice it shows is noise
        keep = rng.random(len(train.image_meta)) >= cause.magnitude
        images, masks, detail = images[keep], masks[keep], {"images_removed": int((~keep).sum())}
    meta = [m for m, k in zip(train.image_meta, keep, strict=True) if k]
    ids = {str(m.get("id")) for m in meta}
    defects = [d for d in train.defects if str(d.get("image_id")) in ids]
    return Planted(images, masks, capacity, cause.model_copy(update={"detail": detail}), meta, defects)


SLICE_ATTRIBUTES = ("size", "contrast", "background", "shape", "thickness", "dose", "count")


def _slice_cause(name: str) -> str:
    """The attribute a slice name starts with (a two-way slice: its first attribute)."""
    return next((a for a in SLICE_ATTRIBUTES if name.startswith(a)), "other")


def named_cause(report: AnalysisReport) -> str:
    """The cause the report's top recommendation points at."""
    if not report.recommendations:
        return "none"
    top = report.recommendations[0]
    if top.action in ACTION_CAUSE:
        return ACTION_CAUSE[top.action]
    return _slice_cause(str(top.evidence.get("slice", "")))


def top_finding_cause(report: AnalysisReport) -> str:
    """The attribute of the report's top finding (its largest confirmed effect); "none" without one."""
    return _slice_cause(report.findings[0].name) if report.findings else "none"


class PlantedResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int
    cause: PlantedCause
    named: str  # the cause the top recommendation points at
    top_finding: str = "none"  # the attribute of the top finding
    recovered: bool  # planted: the cause was named; null: nothing above threshold
    n_findings: int


def fit_predict(
    trainer: Trainer,
    images: np.ndarray,
    masks: np.ndarray,
    capacity: float,
    seed: int,
    targets: tuple[np.ndarray, ...],
) -> list[np.ndarray]:
    """Train one model and return its probabilities on each of ``targets`` (module level, so a
    process pool can run it: a trained model never leaves its worker, only its predictions)."""
    model = trainer.fit(images, masks, capacity=capacity, seed=seed)
    return [model.predict(t) for t in targets]


def analyse_planted(
    planted: Planted,
    cand_dev: np.ndarray,
    cand_train: np.ndarray,
    dev: SplitLike,
    reference: Evaluated,
    *,
    seed: int,
    reference_train: Evaluated | None = None,
    seed_reference: Evaluated | None = None,
    seed_reference_train: Evaluated | None = None,
    more_seed_references: list[tuple[Evaluated, Evaluated]] | None = None,
) -> tuple[PlantedResult, AnalysisReport]:
    """Analyse a candidate trained on ``planted`` (its probabilities on dev and on the planted
    training images) against the reference and the seed-noise twins; see ``run_planted``."""
    cause = planted.cause
    extras = Extras(
        reference=reference,
        reference_train=reference_train,
        train=Evaluated(planted, cand_train),
        seed_reference=seed_reference,
        seed_reference_train=seed_reference_train,
        label_estimate=False,
        more_seed_references=[d for d, _ in more_seed_references or []],
        more_seed_references_train=[t for _, t in more_seed_references or []],
    )
    report, _ = analyse(Evaluated(dev, cand_dev), seed=seed, extras=extras)
    named, top = named_cause(report), top_finding_cause(report)
    if cause.kind in NULL_KINDS:  # a null run: nothing above threshold, so "leave it" and no finding
        recovered = named == "none" and not report.findings
    else:  # the criterion: the cause is the top finding or the top recommendation
        recovered = cause.kind in (named, top)
    return PlantedResult(
        seed=seed,
        cause=cause,
        named=named,
        top_finding=top,
        recovered=recovered,
        n_findings=len(report.findings),
    ), report


def run_planted(
    cause: PlantedCause,
    trainer: Trainer,
    train: SplitLike,
    dev: SplitLike,
    reference: Evaluated,
    *,
    seed: int,
    reference_train: Evaluated | None = None,
    seed_reference: Evaluated | None = None,
    seed_reference_train: Evaluated | None = None,
    more_seed_references: list[tuple[Evaluated, Evaluated]] | None = None,
) -> tuple[PlantedResult, AnalysisReport]:
    """Train a candidate on the planted data and analyse it against the reference on dev.

    ``reference`` is the unplanted model (same seed) on ``dev``; ``reference_train`` the same
    model on the unplanted training data, which lets the analysis tell underfitting apart;
    ``seed_reference`` the unplanted model trained with another seed, on dev, whose difference
    from ``reference`` is the seed-noise band a finding must beat (``seed_reference_train``: the
    same model on the training data, the band of the underfit input); ``more_seed_references``
    further unplanted seeds as (dev, train) pairs: the band is the largest any seed shows.
    """
    planted = plant(cause, train, np.random.default_rng(seed))
    cand_dev, cand_train = fit_predict(
        trainer, planted.images, planted.masks, planted.capacity, seed, (dev.images, planted.images)
    )
    return analyse_planted(
        planted,
        cand_dev,
        cand_train,
        dev,
        reference,
        seed=seed,
        reference_train=reference_train,
        seed_reference=seed_reference,
        seed_reference_train=seed_reference_train,
        more_seed_references=more_seed_references,
    )


def rates(results: list[PlantedResult]) -> dict[str, Interval]:
    """Recovery rate over planted runs and false-finding rate over null runs, with Wilson intervals."""
    planted = [r for r in results if r.cause.kind not in NULL_KINDS]
    null = [r for r in results if r.cause.kind in NULL_KINDS]
    return {
        "recovery": wilson_interval(sum(r.recovered for r in planted), len(planted)),
        "false_finding": wilson_interval(sum(not r.recovered for r in null), len(null)),
    }


@dataclass(frozen=True)
class MixRun:
    """One planted-cause run of a fixed mix: the cause, the reference seed, the training seed.

    A planted run trains with the reference's seed. A null run trains with another seed than
    both the reference and its seed-noise twin, so what it sees is training noise alone (with
    the reference's own seed an unplanted run would just be the reference again).
    """

    kind: CauseKind
    ref_seed: int
    train_seed: int
    draw_seed: int  # seeds the magnitude (and the masks a corruption erases)


FitJob = tuple[
    np.ndarray, np.ndarray, float, int, tuple[np.ndarray, ...]
]  # images, masks, capacity, seed, targets


def fit_all(trainer: Trainer, jobs: list[FitJob], workers: int) -> list[list[np.ndarray]]:
    """``fit_predict`` for every job, in order: in this process (``workers`` <= 1), or in a pool of
    spawned processes. Each training is single-threaded and seeded, so both give the same result."""
    if workers <= 1 or len(jobs) <= 1:
        return [fit_predict(trainer, *job) for job in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(fit_predict, trainer, *job) for job in jobs]
        return [f.result() for f in futures]


def run_mix(
    mix: list[MixRun],
    trainer: Trainer,
    train: SplitLike,
    dev: SplitLike,
    *,
    noise_offset: int | tuple[int, ...],
    ranges: Ranges | None = None,
    workers: int = 1,
) -> list[tuple[PlantedResult, AnalysisReport]]:
    """Every run of ``mix``, each analysed against the unplanted reference of its ``ref_seed``
    and the seed-noise band of the unplanted seeds ``ref_seed + o`` for each offset ``o`` in
    ``noise_offset``; every unplanted model is trained once and shared by the runs of its seed.
    ``workers`` > 1 trains that many models at a time in spawned processes (the trainer must
    pickle); the analyses run here afterwards."""
    offsets = (noise_offset,) if isinstance(noise_offset, int) else noise_offset
    seeds = sorted({run.ref_seed + o for run in mix for o in (0, *offsets)})
    planted = [
        plant(
            draw_cause(np.random.default_rng(run.draw_seed), run.kind, ranges),
            train,
            np.random.default_rng(run.train_seed),
        )
        for run in mix
    ]
    jobs: list[FitJob] = [(train.images, train.masks, 1.0, s, (dev.images, train.images)) for s in seeds]
    jobs += [
        (p.images, p.masks, p.capacity, run.train_seed, (dev.images, p.images))
        for run, p in zip(mix, planted, strict=True)
    ]
    probs = fit_all(trainer, jobs, workers)
    unplanted = {s: (Evaluated(dev, d), Evaluated(train, t)) for s, (d, t) in zip(seeds, probs, strict=False)}
    out = []
    for run, p, (cand_dev, cand_train) in zip(mix, planted, probs[len(seeds) :], strict=True):
        ref_dev, ref_train = unplanted[run.ref_seed]
        (twin_dev, twin_train), *more = [unplanted[run.ref_seed + o] for o in offsets]
        out.append(
            analyse_planted(
                p,
                cand_dev,
                cand_train,
                dev,
                ref_dev,
                seed=run.train_seed,
                reference_train=ref_train,
                seed_reference=twin_dev,
                seed_reference_train=twin_train,
                more_seed_references=more,
            )
        )
    return out


def rate_lines(results: list[PlantedResult]) -> list[str]:
    """People-facing lines: each run, then the recovery and false-finding rates with intervals."""
    lines = [
        f"{r.cause.kind} ({r.cause.magnitude}, seed {r.seed}) -> top recommendation {r.named}, top finding "
        f"{r.top_finding}, {r.n_findings} finding(s): {'ok' if r.recovered else 'MISSED'}"
        for r in results
    ]
    for name, iv in rates(results).items():
        lines.append(f"{name} rate {iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}] (Wilson 95%)")
    return lines
