"""The ``analyse`` step of a run: the current best on dev, as an ``AnalysisReport`` (host-computed).

The report folder (JSON, Markdown, HTML, error and slice plots, crops) is
``runs/<run>/analysis/<best sha256[:12]>/``; a resumed run reads it back instead of redoing it.
Probabilities come from the confined scorer (the best may be a promoted agent model). Predicted
effects are sized from what each rule's fixes recovered before in this home (``analysis.recommend``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents._predictions import measured_shares
from agents.run_setup import RunSetup
from analysis.render import write_report
from analysis.report import AnalysisReport, Evaluated, Extras, analyse
from analysis.toy import ToySplit
from synthetic.splits import Split, read_split
from synthetic.versions import DatasetVersion
from vision.metrics import aggregate, per_image_metrics
from vision.perturb import PERTURBATIONS, perturb

ANALYSIS_SEED = 0  # seed of the dev halves and bootstraps: the same best gives the same report
TRAIN_SAMPLE_IMAGES = 128  # train images scored for the train-dev gap; more costs scorer time
PERTURBATION_SEVERITY = 3  # of 1..5: the middle of each perturbation's range (vision/perturb.py)


def analyse_best(setup: RunSetup, dataset: DatasetVersion, model: Path, sha256: str) -> AnalysisReport:
    """Analyse ``model`` on ``dataset``'s dev split (with a sample of its train split: what the best
    trained on); write the report folder, or read it back when it exists (a resumed run)."""

    out = setup.layout.analysis_dir(sha256)
    if (out / "report.json").is_file():
        return AnalysisReport.model_validate_json((out / "report.json").read_text())
    dev_split = read_split(dataset.dev)
    dev = Evaluated(dev_split, np.asarray(setup.score(model, dev_split.images))[:, 0])
    train = _train_sample(setup, model, read_split(dataset.train))
    drops = perturbation_drops(setup, model, dev_split)
    report, errors = analyse(
        dev,
        model_sha256=sha256,
        data=dev_split.content_hash or dataset.ref,
        threshold=0.5,
        seed=ANALYSIS_SEED,
        extras=Extras(train=train, perturbations=drops, measured_shares=measured_shares(setup.home)),
    )
    return write_report(report, dev, errors, out)


def _train_sample(setup: RunSetup, model: Path, train: Split) -> Evaluated:
    take = np.sort(np.random.default_rng(ANALYSIS_SEED).permutation(len(train))[:TRAIN_SAMPLE_IMAGES])
    ids = {str(train.image_meta[int(k)].get("id")) for k in take}
    sample = ToySplit(
        np.asarray(train.images[take]),
        np.asarray(train.masks[take]),
        [train.image_meta[int(k)] for k in take],
        [d for d in train.defects if str(d.get("image_id")) in ids],
    )
    return Evaluated(sample, np.asarray(setup.score(model, sample.images))[:, 0])


def perturbation_drops(setup: RunSetup, model: Path, dev: Split) -> dict[str, float]:
    """Dev dice lost under each perturbation at a middle severity (what the robustness rule reads).

    Every perturbed copy goes to the confined scorer in one call: its start-up, not the images,
    is what a call costs.
    """

    images, masks = np.asarray(dev.images), np.asarray(dev.masks)
    sets = [(images, masks)] + [
        perturb(name, PERTURBATION_SEVERITY, images, masks, ANALYSIS_SEED) for name in PERTURBATIONS
    ]
    prob = np.asarray(setup.score(model, np.concatenate([x for x, _ in sets])))[:, 0]
    n = len(images)
    dice = [
        float(aggregate(per_image_metrics(prob[k * n : (k + 1) * n], y, threshold=0.5))["dice"])
        for k, (_, y) in enumerate(sets)
    ]
    return {name: round(dice[0] - dice[k + 1], 4) for k, name in enumerate(PERTURBATIONS)}
