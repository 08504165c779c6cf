"""CLI commands for analysis. See docs/cli.md for the contract."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer

from analysis.render import write_report
from analysis.report import AnalysisReport, Evaluated, Extras, analyse, summary_lines
from analysis.toy import ToySplit
from cli._common import HomeOpt, JsonOpt, emit_json, home_for
from segfactory.errors import DataError, PolicyError, UsageError
from segfactory.home import Home
from segfactory.records import sha256_file
from synthetic.check import require_intact
from synthetic.intensity import split_stats
from synthetic.splits import read_split
from vision.onnx_infer import predict
from vision.training_data import collapse_finding, training_range

if TYPE_CHECKING:
    from vision.training_data import TrainingRange

TRAIN_SAMPLE_IMAGES = 256  # train images scored for the train-dev gap and the train label estimate


def _model_path(model: Path) -> Path:
    path = model / "model.onnx" if model.is_dir() else model
    if not path.is_file():
        raise DataError(f"no model at {model}: expected a model.onnx file or a run folder holding one")
    return path


def _refuse_vault(data: Path, home: Home) -> None:
    """The analysis reads open data only: a path under the home's vault is refused (trust rule 1)."""
    import os

    vault = home.vault.resolve()
    for path in (
        Path(os.path.abspath(data.expanduser())),
        data.expanduser().resolve(),
    ):  # as named, and linked
        if path == vault or vault in path.parents:
            raise PolicyError(
                f"{data} is under the home's vault {vault}; analysis reads dev data only, "
                "never a vault tier. Pass a dataset version or a dev split folder."
            )


def _splits(data: Path) -> tuple[Any, Any]:
    """(dev, train or None) from a dataset version (dev/ and train/) or a single split folder.

    Each split's files are checked against its manifest first; a changed file is refused.
    """
    if (data / "dev").is_dir():
        require_intact(data / "dev")
        train = None
        if (data / "train").is_dir():
            require_intact(data / "train")
            train = read_split(data / "train", mmap=True)
        return read_split(data / "dev", mmap=True), train
    if not data.is_dir():
        raise DataError(f"data {data} not found; give a dataset version (with dev/) or a split folder")
    require_intact(data)
    return read_split(data, mmap=True), None


def _train_sample(train: Any, seed: int) -> Any:
    import numpy as np

    n = len(train)
    take = np.sort(np.random.default_rng(seed).permutation(n)[:TRAIN_SAMPLE_IMAGES])
    ids = {str(train.image_meta[int(k)].get("id")) for k in take}
    return ToySplit(
        np.asarray(train.images[take]),
        np.asarray(train.masks[take]),
        [train.image_meta[int(k)] for k in take],
        [d for d in train.defects if str(d.get("image_id")) in ids],
    )


class ExtraInputs(TypedDict, total=False):
    """``analyse --inputs``: the optional ``Extras`` read from a JSON file (name -> value)."""

    learning_curve: dict[str, float]
    perturbations: dict[str, float]


class RecommendationRow(TypedDict):
    id: str
    action: str
    kind: str
    rationale: str
    predicted_effect: dict[str, object]  # the ExpectedEffect's JSON form
    evidence: dict[str, object]  # the finding the recommendation rests on, as the analysis recorded it


class AnalysisSummary(TypedDict):
    """What ``analyse --json`` prints of the report (beside its training-range reading)."""

    out: str
    report: str
    html: str
    n_images: int
    n_defects: int
    overall: dict[str, float]
    error_counts: dict[str, dict[str, int]]
    findings: list[str]
    n_slices_tested: int
    notes: list[str]
    recommendations: list[RecommendationRow]


def _extra_inputs(path: Path | None) -> ExtraInputs:
    import json

    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--inputs {path}: cannot read a JSON object ({exc})") from None
    unknown = set(data) - {"learning_curve", "perturbations"}
    if not isinstance(data, dict) or unknown:
        raise UsageError(f"--inputs {path}: expected keys learning_curve, perturbations; got {sorted(data)}")
    extra: ExtraInputs = {}
    for key, value in data.items():
        floats = {str(a): float(b) for a, b in value.items()}
        if key == "learning_curve":
            extra["learning_curve"] = floats
        else:
            extra["perturbations"] = floats
    return extra


def _summary(report: AnalysisReport, out: Path) -> AnalysisSummary:
    return {
        "out": str(out),
        "report": str(out / "report.json"),
        "html": str(out / "report.html"),
        "n_images": report.n_images,
        "n_defects": report.n_defects,
        "overall": report.overall,
        "error_counts": report.error_counts,
        "findings": [f.name for f in report.findings],
        "n_slices_tested": report.n_slices_tested,
        "notes": report.notes,
        "recommendations": [
            {
                "id": r.id,
                "action": r.action,
                "kind": r.kind.value,
                "rationale": r.rationale,
                "predicted_effect": r.predicted_effect.model_dump(mode="json"),
                "evidence": r.evidence,
            }
            for r in report.recommendations
        ],
    }


def analyse_cmd(
    model: Annotated[Path, typer.Option("--model", help="model.onnx, or a run folder holding one.")],
    data: Annotated[
        Path, typer.Option("--data", help="Dataset version (dev/ and train/) or a split folder.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Report folder (default: <model folder>/analysis).")
    ] = None,
    threshold: Annotated[
        float, typer.Option("--threshold", help="Probability threshold for a void pixel.")
    ] = 0.5,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the dev halves and bootstrap.")] = 0,
    inputs: Annotated[
        Path | None, typer.Option("--inputs", help="JSON with learning_curve and/or perturbations.")
    ] = None,
    no_labels: Annotated[
        bool, typer.Option("--no-labels", help="Skip the cleanlab label-error estimate.")
    ] = False,
    train_data: Annotated[
        str | None,
        typer.Option(
            "--train-data",
            help="The model's training data (dataset version, split folder or NAME/vK) "
            "when nothing beside the model records it.",
        ),
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Analyse a model on dev: error types, slices, label errors, recommendations (Markdown + HTML)."""
    resolved = home_for(home)
    _refuse_vault(data, resolved)
    onnx_path = _model_path(model)

    dev_split, train_split = _splits(data)
    dev = Evaluated(dev_split, predict(onnx_path, dev_split.images))
    train = None
    if train_split is not None and len(train_split):
        sample = _train_sample(train_split, seed)
        train = Evaluated(sample, predict(onnx_path, sample.images))
    extras = Extras(train=train, label_estimate=not no_labels, **_extra_inputs(inputs))
    report, errors = analyse(
        dev,
        model_sha256=sha256_file(onnx_path),
        data=dev_split.content_hash or str(data),
        threshold=threshold,
        seed=seed,
        extras=extras,
    )
    shift = _training_range(dev, onnx_path, train_data, resolved.root, threshold)
    if shift.outside or shift.finding == "shift":
        report = report.model_copy(update={"notes": [_shift_note(shift), *report.notes]})  # read first
    target = out if out is not None else onnx_path.parent / "analysis"
    report = write_report(report, dev, errors, target)
    if json_out:
        emit_json(
            {
                **_summary(report, target),
                "training_range": shift.as_json(),
                "outside_training_range": shift.outside,
            }
        )
        return
    typer.echo(f"analysis of {onnx_path} on {data}: {report.n_images} images -> {target / 'report.html'}")
    for note in report.notes:
        typer.echo(f"  note: {note}")
    for line in summary_lines(report):
        typer.echo(f"  {line}")


def _training_range(
    dev: Any, onnx_path: Path, train_data: str | None, home_root: Path, threshold: float
) -> TrainingRange:
    """The dev set against the model's training data, with zero detections read as a shift when outside."""
    import numpy as np

    block = training_range(split_stats(dev.split), onnx_path, train_data, home_root)
    detected = int((np.asarray(dev.prob) >= threshold).sum())  # no void pixel <=> no detected void
    return collapse_finding(block, detected, int(np.asarray(dev.split.masks).sum()))


def _shift_note(shift: TrainingRange) -> str:
    """The report's note for a set outside the training range (people read it first)."""
    note = "the analysed set lies outside the model's training range: " + "; ".join(shift.reasons or [])
    return note + (f"; {shift.message}" if shift.message else "")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("analyse")(analyse_cmd)
