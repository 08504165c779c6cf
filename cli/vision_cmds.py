"""CLI commands for vision: ``train`` and ``evaluate``. See docs/cli.md for the contract."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import HomeOpt, JsonOpt, console, emit_json, home_for, print_training_range
from segfactory.errors import UsageError
from vision.config import load_config
from vision.evaluate import evaluate
from vision.training_data import write_training_record

if TYPE_CHECKING:
    from vision.evaluate import EvalReport

TrainDataOpt = Annotated[
    str | None,
    typer.Option(
        "--train-data",
        help="The model's training data (dataset version folder, split folder or NAME/vK), "
        "when nothing beside the model records it.",
    ),
]


def train_cmd(
    config: Annotated[Path, typer.Option("--config", help="Training config YAML (see configs/).")],
    data: Annotated[Path, typer.Option("--data", help="Dataset version folder holding train/ and dev/.")],
    out: Annotated[Path, typer.Option("--out", help="Run folder to write (must be new or empty).")],
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in --out from its last epoch.")
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")
    ] = True,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Train a model (or tune baseline-classical) and check its reload and ONNX export."""
    if not json_out:
        import logging
        import sys

        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    cfg = load_config(config)  # a bad config fails before torch is imported
    from vision.train import train  # deferred: loads torch

    result = train(cfg, data, out, progress=progress and not json_out, resume=resume)

    write_training_record(out, data)  # the host's record of what this model was trained on
    if json_out:
        emit_json({"out": str(out), **result.model_dump(mode="json")})
        return
    con = console()
    state = "usable" if result.usable else f"NOT usable ({result.stopped_reason or 'a check failed'})"
    con.print(
        f"{result.model}: {result.epochs_completed} epochs, {state}; reload_ok={result.reload_ok}, "
        f"onnx parity={result.parity.get('max_abs_diff')}"
    )
    _metrics_table(con, {"dev": result.dev})


def evaluate_cmd(
    model: Annotated[Path, typer.Option("--model", help="model.onnx, or a run folder holding one.")],
    data: Annotated[Path, typer.Option("--data", help="A split folder, or a dataset version (its dev/).")],
    robustness: Annotated[bool, typer.Option("--robustness", help="Run the perturbation suite too.")] = False,
    compare: Annotated[
        Path | None, typer.Option("--compare", help="Reference model for a paired bootstrap.")
    ] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="Probability threshold.")] = 0.5,
    iou_match: Annotated[float, typer.Option("--iou-match", help="Component IoU needed for a match.")] = 0.1,
    min_support: Annotated[
        int, typer.Option("--min-support", help="Members a slice needs to be the worst.")
    ] = 20,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Seed for bootstrap and perturbations.")] = 0,
    train_data: TrainDataOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Score a model through onnxruntime: pixel, object, size-bin, boundary and slice metrics.

    Refuses a split whose files differ from its manifest; marks a set outside the model's
    training range (intensity, contrast, noise).
    """
    if n_boot < 1 or min_support < 1:
        raise UsageError(f"--n-boot and --min-support must be >= 1; got {n_boot}, {min_support}")
    report = evaluate(
        model,
        data,
        with_robustness=robustness,
        compare_to=compare,
        threshold=threshold,
        iou_match=iou_match,
        seed=seed,
        n_boot=n_boot,
        min_support=min_support,
        train_data=train_data,
        home_root=home_for(home).root,
    )
    if json_out:
        emit_json(report.as_json())
        return
    _print_report(report)


def _metrics_table(con: Any, columns: dict[str, dict[str, float]]) -> None:
    from rich.table import Table

    table = Table("metric", *columns)
    keys = [k for k in next(iter(columns.values())) if not k.startswith("n_") or k.startswith("n_size")]
    for key in keys:
        table.add_row(key, *(f"{c[key]:.4f}" if key in c else "-" for c in columns.values()))
    con.print(table)


def _print_report(report: EvalReport) -> None:
    con = console()
    columns = {"model": report.metrics}
    if report.comparison is not None:
        columns = {"reference": report.comparison.reference_metrics, "model": report.metrics}
    _metrics_table(con, columns)
    f1 = report.intervals["object_f1"]
    con.print(f"object F1 {f1.estimate:.4f} [{f1.low:.4f}, {f1.high:.4f}] (95% bootstrap over images)")
    if report.comparison is not None:
        d = report.comparison.diff
        con.print(f"object F1 model - reference: {d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}] (paired)")
    worst = report.worst_slice.worst
    if worst:
        con.print(
            f"worst slice: {worst.attribute}={worst.value} {worst.metric}={worst.score:.3f} "
            f"(n={worst.support})"
        )
    print_training_range(con, report.training_range)
    for cell in report.robustness.cells if report.robustness is not None else []:
        con.print(
            f"{cell.perturbation:>17} s{cell.severity} F1={cell.object_f1:.3f} "
            f"in_range={cell.within_training_range} {cell.finding}"
        )


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("train")(train_cmd)
    app.command("evaluate")(evaluate_cmd)
