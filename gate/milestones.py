"""Milestones: score sealed, never-queried and real-holdout once, for people.

A milestone has a name used once; each model scored counts against the quota of the tier
version (``milestone_quota`` in the win rule). These tiers have no other query path: this is
the only code that reads them. The report (scores with bootstrap intervals) goes back to the
person's CLI, which writes it under ``runs/<run>/people/milestones/``.

On a real tier the report also holds the tier's intensity statistics (aggregates only) and,
per model, whether the tier lies outside that model's training range (``training_range``),
read from the records beside the model's host copy (the current best's path, or a ticket's
``model.onnx`` with the same hash); zero detections there are reported as a shift.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gate import tiers
from gate._provider import ProviderError
from gate.intake import CheckedModel, IntakeError, inspect_bytes, inspect_model
from gate.ledger import LedgerError
from gate.milestone_report import MilestoneReport, ModelScore, TierScores
from gate.scorer import ScoringError, score_checked
from gate.win_rule import slice_recall
from segfactory.errors import GateError, UsageError
from segfactory.records import sha256_file
from segfactory.stats import bootstrap_ci
from synthetic.intensity import split_stats
from vision.metrics import SIZE_BIN_NAMES, aggregate, object_f1, per_image_metrics
from vision.training_data import (
    TICKET_MANIFEST,
    TRAINING_RECORD,
    collapse_finding,
    training_range,
    unknown_range,
)

MILESTONE_TIERS = ("sealed", "never-queried", "real-holdout")
REAL_TIERS = ("real-holdout",)  # tiers of real images: compared with each model's training data
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class MilestoneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME.pattern)
    run_id: str = Field(pattern=NAME.pattern)
    models_b64: list[str] = Field(default_factory=list, max_length=16)  # empty: the current best
    tiers: list[str] = Field(default_factory=lambda: list(MILESTONE_TIERS))


def _models(gate: Any, req: MilestoneRequest) -> list[CheckedModel]:
    try:
        if req.models_b64:
            return [inspect_bytes(base64.b64decode(m, validate=True)) for m in req.models_b64]
        best = gate.ledger.current_best()
        if best is None:
            raise GateError("no current best registered and no --model given")
        return [inspect_model(best["model_path"])]
    except (IntakeError, ValueError) as exc:
        raise GateError(f"milestone model refused at intake: {exc}") from None


def _plan(gate: Any, req: MilestoneRequest) -> dict[str, int]:
    unknown = sorted(set(req.tiers) - set(MILESTONE_TIERS))
    if unknown:
        raise UsageError(f"milestone tiers {unknown} unknown; known: {', '.join(MILESTONE_TIERS)}")
    built = tiers.built_tiers(gate.vault)
    plan = {tier: built[tier] for tier in req.tiers if tier in built}
    if not plan:
        raise GateError(f"none of the tiers {req.tiers} is built in the vault")
    return plan


def _check_quota(gate: Any, plan: dict[str, int], models: list[CheckedModel], quotas: dict[str, int]) -> None:
    for tier, version in plan.items():
        seen = gate.ledger.milestone_models(tier, version)
        new = {m.sha256 for m in models} - seen
        if len(seen) + len(new) > quotas.get(tier, 0):
            raise GateError(
                f"milestone quota on {tier} v{version}: {len(seen)} scored + {len(new)} new > "
                f"{quotas.get(tier, 0)}; a person must rotate it (`segfactory gate rotate --tier {tier}`)"
            )


def _score(gate: Any, model: CheckedModel, tier: str, version: int, rule: Any) -> ModelScore:
    _, split = tiers.read_tier(gate.vault, tier, version)
    try:
        scoring = gate.scoring(tier, version)
    except ProviderError as exc:
        raise GateError(str(exc)) from None
    prob = score_checked(model, np.asarray(split.images), scoring=scoring)[:, 0]
    per = per_image_metrics(prob, np.asarray(split.masks), threshold=rule.threshold, iou_match=rule.iou_match)
    cmp = rule.comparison
    interval = bootstrap_ci(
        (per.object_tp, per.object_fp, per.object_fn),
        object_f1,
        n_boot=cmp.n_boot,
        seed=cmp.seed,
        alpha=cmp.alpha,
    )
    scores = aggregate(per)
    slices = slice_recall(per.size_hits, per.size_count, rule.robust.min_support)
    return ModelScore(
        provider=scoring.provider,
        object_f1=interval,
        pixel_iou=scores["pixel_iou"],
        dice=scores["dice"],
        object_recall=scores["object_recall"],
        n_images=len(split),
        n_detections=int(per.object_tp.sum() + per.object_fp.sum()),
        n_voids=int(per.object_tp.sum() + per.object_fn.sum()),
        slice_recall={SIZE_BIN_NAMES[i]: value for i, value in slices.items()},
        worst_slice_recall=min(slices.values()) if slices else None,
        # what a binomial interval on the slice recall needs
        slice_voids={SIZE_BIN_NAMES[i]: int(per.size_count.sum(axis=0)[i]) for i in slices},
    )


def host_copies(gate: Any, models: list[CheckedModel]) -> dict[str, Path]:
    """sha256 -> a host copy of that model with its training records beside it.

    Candidates: the current best's recorded path, then every ticket's ``model.onnx`` under the
    home's ``runs/``; a copy without a record beside it (the vault's own copy) is skipped.
    """
    wanted = {m.sha256: len(m.data) for m in models}
    best = gate.ledger.current_best()
    candidates = [Path(best["model_path"])] if best is not None else []
    candidates += sorted(Path(gate.home_root, "runs").glob("*/tickets/*/model.onnx"))
    found: dict[str, Path] = {}
    for path in candidates:
        if len(found) == len(wanted):
            break
        if not any((path.parent / name).is_file() for name in (TRAINING_RECORD, TICKET_MANIFEST)):
            continue
        try:
            if path.stat().st_size in wanted.values() and (sha := sha256_file(path)) in wanted:
                found.setdefault(sha, path)
        except OSError:
            continue  # a ticket folder removed meanwhile
    return found


def _real_tier(
    gate: Any, tier: str, version: int, scored: dict[str, ModelScore], paths: dict[str, Path]
) -> TierScores:
    """The tier's statistics and, per model, the tier against its training range."""
    _, split = tiers.read_tier(gate.vault, tier, version)
    stats = split_stats(split)
    ranged = {}
    for sha, scores in scored.items():
        if sha not in paths:
            block = unknown_range(
                "no host copy of this model (the current best or a ticket's model.onnx) to read its "
                "training data from"
            )
        else:  # the tier's statistics are given once, beside the models
            block = training_range(stats, paths[sha], None, gate.home_root, with_set=False)
        finding = collapse_finding(block, scores.n_detections or 0, scores.n_voids or 0)
        ranged[sha] = scores.model_copy(update={"training_range": finding})
    return TierScores(version=version, models=ranged, intensity=stats)


def run_milestone(gate: Any, req: MilestoneRequest) -> MilestoneReport:
    """Score every model on every planned tier once; the name and the quota are spent first."""
    rule = gate.rule()
    models = _models(gate, req)
    plan = _plan(gate, req)
    quotas = dict(rule.milestone_quota)
    _check_quota(gate, plan, models, quotas)
    try:
        gate.ledger.start_milestone(
            req.name, req.run_id, {"tiers": plan, "models": [m.sha256 for m in models]}
        )
        for tier, version in plan.items():
            for model in models:
                gate.ledger.count_milestone_model(tier, version, model.sha256, req.name, quotas.get(tier, 0))
    except LedgerError as exc:
        gate.ledger.queue_event("gate.milestone_refused", {"name": req.name, "reason": str(exc)})
        raise GateError(str(exc)) from None
    paths = host_copies(gate, models) if set(plan) & set(REAL_TIERS) else {}
    scored_tiers = {}
    for tier, version in plan.items():
        try:
            scored = {m.sha256: _score(gate, m, tier, version, rule) for m in models}
            block = TierScores(version=version, models=scored)
            if tier in REAL_TIERS:
                block = _real_tier(gate, tier, version, scored, paths)
        except ScoringError as exc:
            block = TierScores(version=version, models={}, error=str(exc))
        scored_tiers[tier] = block
    gate.ledger.queue_event("gate.milestone", {"name": req.name, "run_id": req.run_id, "tiers": plan})
    return MilestoneReport(name=req.name, run_id=req.run_id, tiers=scored_tiers)
