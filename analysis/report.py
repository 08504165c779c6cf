"""The ``AnalysisReport``: the one thing the proposer later sees about a model.

It is built from dev (and optionally train, which agents see anyway) and never from a vault
tier. ``analyse`` runs the whole analysis on predictions already made; the CLI and the
planted-cause runs both call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from analysis.errortypes import OK, ErrorAnalysis, ErrorType, analyse_errors, rank_problems
from analysis.labels import LabelEstimate
from analysis.labels import estimate as label_estimate
from analysis.recommend import Inputs, Policy, recommend
from analysis.slices import TABLE_ROWS, SliceReport, SliceRow, Units, find_slices
from analysis.units import defect_units, image_units
from segfactory.errors import DataError
from segfactory.records import Recommendation
from segfactory.stats import bootstrap_mean_ci, noise_edge, wilson_interval
from synthetic.splits import ImageMeta

N_BOOT_OVERALL = 1000  # resamples for the overall dice interval
CONFIDENT_FLOOR = 0.1  # probabilities below this count as "no response" in the confidence statistic
# A candidate whose positive dev pixels are below this share of the unplanted models' median has collapsed:
# it predicts (nearly) nothing, so every relative slice just mirrors where the reference was right.
COLLAPSE_SHARE = 0.1
SCALAR_NOISE_LEVEL = 0.99  # one-sided prediction level of the seed-noise band of the relative scalar inputs
MIN_EMPTY_IMAGES = 30  # images labelled empty each split needs before its empty-label hit rate is used


class SplitLike(Protocol):
    images: np.ndarray
    masks: np.ndarray
    image_meta: list[ImageMeta]
    defects: list[dict[str, Any]]  # defects.jsonl rows, as synthetic.splits.Split holds them


class ProblemRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    error_type: str
    size_bin: str
    count: int
    share: float
    text: str


class AnalysisReport(BaseModel):
    """Dev analysis of one model: errors, slices, label estimate, recommendations, notes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    model_sha256: str
    data: str  # the dev split's content hash or path; never a vault tier
    n_images: int
    n_defects: int
    threshold: float
    overall: dict[str, float]
    error_counts: dict[str, dict[str, int]]
    problems: list[ProblemRow]
    slices: list[SliceRow]
    n_slices_tested: int
    n_slices_below_support: int
    findings: list[SliceRow]
    dev_labels: LabelEstimate | None = None
    train_labels: LabelEstimate | None = None
    train_dev_gap: float | None = None
    learning_curve: dict[str, float] | None = None
    perturbations: dict[str, float] | None = None
    reference_miss_rate_increase: float | None = None
    recommendations: list[Recommendation]
    notes: list[str] = Field(default_factory=list)
    crops: list[str] = Field(default_factory=list)


@dataclass
class Evaluated:
    """A split with a model's probabilities on it."""

    split: SplitLike
    prob: np.ndarray  # (N, H, W)
    _errors: dict[float, ErrorAnalysis] = field(default_factory=dict, repr=False)  # per threshold

    @property
    def ids(self) -> list[str]:
        return [str(m.get("id", k)) for k, m in enumerate(self.split.image_meta)]

    def errors(self, threshold: float) -> ErrorAnalysis:
        cached = self._errors.get(threshold)
        if cached is None:
            cached = self._errors[threshold] = analyse_errors(
                self.prob,
                self.split.masks,
                threshold=threshold,
                defects=self.split.defects,
                image_ids=self.ids,
            )
        return cached


def _overall(errors: ErrorAnalysis, seed: int) -> dict[str, float]:
    dice = bootstrap_mean_ci(errors.per_image["dice"], n_boot=N_BOOT_OVERALL, seed=seed)
    n_gt = len(errors.gt)
    missed = sum(c.outcome == ErrorType.MISSED.value for c in errors.gt)
    miss = wilson_interval(missed, n_gt)
    return {
        "dice": dice.estimate,
        "dice_low": dice.low,
        "dice_high": dice.high,
        "miss_rate": miss.estimate,
        "miss_rate_low": miss.low,
        "miss_rate_high": miss.high,
        "voids": float(n_gt),
        "false_alarms_per_image": errors.false_alarm_area.size / max(errors.n_images, 1),
    }


def _input_notes(dev: Evaluated, threshold: float) -> list[str]:
    notes = []
    if not (dev.prob >= threshold).any():
        notes.append("the model predicts no void pixel on any dev image; every void counts as missed")
    if not dev.split.defects:
        notes.append("dev has no defect rows; defect slices and miss rates are empty")
    return notes


@dataclass
class Extras:
    """Optional inputs to the recommendation rules."""

    train: Evaluated | None = None  # for the train-dev gap and the train label estimate
    reference: Evaluated | None = None  # same dev, reference model: findings become relative
    reference_train: Evaluated | None = None  # the reference model on its own training data
    seed_reference: Evaluated | None = None  # the unplanted model with another seed, on dev: seed-noise band
    seed_reference_train: Evaluated | None = None  # that model on the training data (noise band of underfit)
    more_seed_references: list[Evaluated] = field(default_factory=list)  # further unplanted seeds, on dev
    more_seed_references_train: list[Evaluated] = field(default_factory=list)  # ...and on the training data
    confirm: Evaluated | None = None  # a fresh set to confirm slices on (else the other half of dev)
    learning_curve: dict[str, float] | None = None
    perturbations: dict[str, float] | None = None
    label_estimate: bool = True
    # rule id -> the shares of their shortfall its fixes recovered on dev before, in this home
    measured_shares: Mapping[str, Sequence[float]] = field(default_factory=dict)


def _twins(extras: Extras) -> list[tuple[Evaluated, Evaluated | None]]:
    """Every unplanted seed-noise model (on dev, and on the training data where given)."""
    dev = ([extras.seed_reference] if extras.seed_reference else []) + extras.more_seed_references
    train: list[Evaluated | None] = [extras.seed_reference_train] if extras.seed_reference else []
    train += extras.more_seed_references_train
    train += [None] * (len(dev) - len(train))
    return list(zip(dev, train, strict=True))


def _image_units(
    meta: list[ImageMeta],
    defects: Sequence[Mapping[str, object]],
    dice: np.ndarray,
    ref_dice: np.ndarray | None,
) -> Units:
    units = image_units(meta, defects, dice, ref_dice)
    if ref_dice is not None:  # a uniform per-void drop costs more dice where there are more voids, so a
        units.columns.pop("count")  # relative image-level count slice is mechanical (defect units keep count)
    return units


def _slices(
    dev: Evaluated, errs: ErrorAnalysis, extras: Extras, threshold: float, seed: int
) -> list[SliceReport]:
    meta, defects = dev.split.image_meta, dev.split.defects
    ref = extras.reference.errors(threshold) if extras.reference else None
    units_d = defect_units(meta, defects, errs.defect_outcome, ref.defect_outcome if ref else None)
    units_i = _image_units(meta, defects, errs.per_image["dice"], ref.per_image["dice"] if ref else None)
    noise_d: list[np.ndarray] | None = None
    noise_i: list[np.ndarray] | None = None
    if ref is not None and _twins(extras):
        others = [twin.errors(threshold) for twin, _ in _twins(extras)]
        noise_d = [defect_units(meta, defects, o.defect_outcome, ref.defect_outcome).outcome for o in others]
        noise_i = [
            _image_units(meta, defects, o.per_image["dice"], ref.per_image["dice"]).outcome for o in others
        ]
    train_d = train_i = None
    if extras.train is not None:  # which slices the training data holds (membership only)
        t = extras.train.split
        train_d = defect_units(t.image_meta, t.defects, [OK] * len(t.defects))
        train_i = image_units(t.image_meta, t.defects, np.zeros(len(t.image_meta)))
    conf_d = conf_i = None
    if extras.confirm is not None and extras.reference is None:
        c = extras.confirm
        cerr = c.errors(threshold)
        conf_d = defect_units(c.split.image_meta, c.split.defects, cerr.defect_outcome)
        conf_i = image_units(c.split.image_meta, c.split.defects, cerr.per_image["dice"])
    return [
        find_slices(units_d, seed=seed, confirm=conf_d, noise=noise_d, train=train_d),
        find_slices(units_i, seed=seed, confirm=conf_i, noise=noise_i, train=train_i),
    ]


def _reference_drop(dev: Evaluated, errs: ErrorAnalysis, extras: Extras, threshold: float) -> float | None:
    if extras.reference is None:
        return None
    ref = extras.reference.errors(threshold)
    units = defect_units(dev.split.image_meta, dev.split.defects, errs.defect_outcome, ref.defect_outcome)
    return float(units.outcome.mean()) if len(units) else 0.0


def _mean_dice(ev: Evaluated, threshold: float) -> float:
    return float(ev.errors(threshold).per_image["dice"].mean())


def _confidence_shift(dev: Evaluated, reference: Evaluated) -> float:
    """Median relative change of the probability on true void pixels both models respond to.

    Training masks that miss voids teach a model to be less sure wherever it responds, so
    nearly every such pixel drops; removing a slice of data or capacity changes *where* a model
    responds far more than how surely, so the median barely moves.
    """
    both = (dev.split.masks > 0) & (dev.prob >= CONFIDENT_FLOOR) & (reference.prob >= CONFIDENT_FLOOR)
    if not both.any():
        return 0.0
    return float(np.median(dev.prob[both].astype(np.float64) / reference.prob[both]) - 1.0)


def _beyond(value: float | None, noise: list[float]) -> float | None:
    """How far ``value`` (candidate vs reference) lies beyond every unplanted seed's ``noise``
    (the same statistic, twin vs reference) in its own direction; 0 inside their range.

    The reference is one unplanted seed too, so the unplanted models span [min(0, noise),
    max(0, noise)]; a candidate counts only beyond that span, as a slice counts only beyond its
    largest seed-to-seed effect.
    """
    if value is None or not noise:
        return value
    edge = noise_edge(noise, upper=value >= 0, level=SCALAR_NOISE_LEVEL)
    return float(np.sign(value) * max(0.0, abs(value) - abs(edge)))


def _net_of_seed_noise(inputs: Inputs, ref: Evaluated, extras: Extras, threshold: float) -> str:
    """Keep only what the relative scalar inputs show beyond the range the seed-noise twins span
    against the reference (the same statistic between unplanted models); returns a note."""
    twins = _twins(extras)
    trains = [t for _, t in twins if t is not None]
    noise: dict[str, list[float]] = {
        "overall_drop": [_reference_drop(t, t.errors(threshold), extras, threshold) or 0.0 for t, _ in twins],
        "label_shift": [_confidence_shift(t, ref) for t, _ in twins],
        "underfit": [],
    }
    if extras.reference_train is not None and trains:
        ref_train = _mean_dice(extras.reference_train, threshold)
        noise["underfit"] = [ref_train - _mean_dice(t, threshold) for t in trains]
    inputs.overall_drop = _beyond(inputs.overall_drop, noise["overall_drop"])
    inputs.label_shift = _beyond(inputs.label_shift, noise["label_shift"])
    inputs.underfit = _beyond(inputs.underfit, noise["underfit"])
    shown = ", ".join(f"{k} [{min(v):+.3f}, {max(v):+.3f}]" for k, v in noise.items() if v)
    return (
        f"relative inputs are net of the seed-noise band ({len(twins)} further unplanted seed(s) differ "
        f"from the reference by {shown})"
    )


def _empty_hit_rate(ev: Evaluated, threshold: float) -> tuple[float, int] | None:
    """Share of the images labelled empty where the model finds a void (a false-alarm component),
    and how many images are labelled empty; ``None`` below ``MIN_EMPTY_IMAGES`` of them."""
    masks = ev.split.masks
    empty = masks.reshape(masks.shape[0], -1).max(axis=1) == 0
    if int(empty.sum()) < MIN_EMPTY_IMAGES:
        return None
    hits = ev.errors(threshold).per_image["false_alarm"][empty] > 0
    return float(hits.mean()), int(empty.sum())


def _empty_hits(
    dev: Evaluated, train: Evaluated | None, threshold: float
) -> tuple[float, int, float, int] | None:
    """The empty-label hit rate on train and on dev (both needed). A within-model contrast: the
    model is compared with itself on two splits, so no reference is needed to cancel what every
    model does (finding faint voids in some images labelled empty, say)."""
    if train is None:
        return None
    on_train, on_dev = _empty_hit_rate(train, threshold), _empty_hit_rate(dev, threshold)
    if on_train is None or on_dev is None:
        return None
    return on_train[0], on_train[1], on_dev[0], on_dev[1]


def _collapse(dev: Evaluated, unplanted: list[Evaluated], threshold: float) -> float:
    """1 - the candidate's positive dev pixels as a share of the unplanted models' median
    (the reference and its seed-noise twins: robust to a reference seed that over-predicts)."""
    typical = float(np.median([int((u.prob >= threshold).sum()) for u in unplanted]))
    if typical == 0:
        return 0.0
    return max(0.0, 1.0 - int((dev.prob >= threshold).sum()) / typical)


def _unless_collapsed(
    inputs: Inputs, dev: Evaluated, unplanted: list[Evaluated], threshold: float, notes: list[str]
) -> list[SliceRow]:
    """A collapsed candidate (predicts nearly nothing where the reference responds) is worse in
    every slice by the reference's own hit rate there, so slices and the confidence shift say
    nothing about a cause; they are withdrawn and the collapse itself becomes the input."""
    collapse = _collapse(dev, unplanted, threshold)
    inputs.collapse = collapse
    if collapse < 1.0 - COLLAPSE_SHARE:
        return inputs.findings
    notes.append(
        f"the candidate collapsed: {1.0 - collapse:.1%} of the unplanted models' positive dev pixels; "
        f"slice findings ({len(inputs.findings)}) and the confidence shift are withdrawn"
    )
    inputs.findings, inputs.label_shift = [], None
    return []


def analyse(
    dev: Evaluated,
    *,
    model_sha256: str = "",
    data: str = "",
    threshold: float = 0.5,
    seed: int = 0,
    extras: Extras | None = None,
    policy: Policy | None = None,
) -> tuple[AnalysisReport, ErrorAnalysis]:
    """Analyse ``dev`` predictions; returns the report and the per-component error analysis."""
    extras = extras or Extras()
    if dev.prob.shape[0] == 0:
        raise DataError("the dev split has no images; nothing to analyse")
    errs = dev.errors(threshold)
    notes = _input_notes(dev, threshold)
    slice_reports = _slices(dev, errs, extras, threshold, seed)
    rows = sorted(
        (r for rep in slice_reports for r in rep.rows),
        key=lambda r: (not r.confirmed, not r.discovered, -r.effect, r.name),
    )
    for rep in slice_reports:
        notes.extend(rep.notes)
    dev_labels = train_labels = None
    if extras.label_estimate:
        dev_labels = label_estimate("dev", dev.prob, dev.split.masks, dev.ids, seed)
        if extras.train is not None:
            t = extras.train
            train_labels = label_estimate("train", t.prob, t.split.masks, t.ids, seed)
    gap = None
    if extras.train is not None:
        gap = _mean_dice(extras.train, threshold) - float(errs.per_image["dice"].mean())
    findings = [r for r in rows if r.confirmed]
    drop = _reference_drop(dev, errs, extras, threshold)
    inputs = Inputs(
        findings=findings,
        overall_drop=drop,
        train_dev_gap=gap,
        learning_curve=extras.learning_curve,
        dev_labels=dev_labels,
        train_labels=train_labels,
        perturbations=extras.perturbations,
        model_dice=float(errs.per_image["dice"].mean()),
        empty_hits=_empty_hits(dev, extras.train, threshold),
        measured_shares=extras.measured_shares,
    )
    if inputs.empty_hits is not None:
        on_train, n_train, on_dev, n_dev = inputs.empty_hits
        notes.append(
            f"images labelled empty where the model finds a void: {on_train:.1%} of {n_train} on train, "
            f"{on_dev:.1%} of {n_dev} on dev (labels-miss-voids compares the two)"
        )
    if (
        extras.reference is not None
    ):  # relative run: absolute label and gap inputs say nothing about the cause
        inputs.dev_labels, inputs.train_dev_gap = None, None
        inputs.label_shift = _confidence_shift(dev, extras.reference)
        if extras.train is not None and extras.reference_train is not None:
            inputs.underfit = _mean_dice(extras.reference_train, threshold) - _mean_dice(
                extras.train, threshold
            )
        if _twins(extras):
            notes.append(_net_of_seed_noise(inputs, extras.reference, extras, threshold))
        unplanted = [extras.reference] + [t for t, _ in _twins(extras)]
        findings = _unless_collapsed(inputs, dev, unplanted, threshold, notes)
    counts = errs.counts()
    report = AnalysisReport(
        model_sha256=model_sha256,
        data=data,
        n_images=int(dev.prob.shape[0]),
        n_defects=len(dev.split.defects),
        threshold=threshold,
        overall=_overall(errs, seed),
        error_counts=counts,
        problems=[
            ProblemRow(
                error_type=p.error_type, size_bin=p.size_bin, count=p.count, share=p.share, text=p.describe()
            )
            for p in rank_problems(counts)
        ],
        slices=rows[:TABLE_ROWS],
        n_slices_tested=sum(r.n_tested for r in slice_reports),
        n_slices_below_support=sum(r.n_below_support for r in slice_reports),
        findings=findings,
        dev_labels=dev_labels,
        train_labels=train_labels,
        train_dev_gap=gap,
        learning_curve=extras.learning_curve,
        perturbations=extras.perturbations,
        reference_miss_rate_increase=drop,
        recommendations=recommend(inputs, policy),
        notes=notes,
    )
    return report, errs


def summary_lines(report: AnalysisReport, k: int = 3) -> list[str]:
    """The top ``k`` recommendations with their evidence, one line each (for the demo and the CLI)."""
    lines = []
    for r in report.recommendations[:k]:
        e = r.predicted_effect
        lines.append(
            f"{r.id}: {r.action} ({r.kind.value}) - {r.rationale}; predicts {e.metric} on "
            f"{e.slice} {e.direction.value} by {e.size}"
        )
    return lines
