"""CLI: ``segfactory label propose --data D``. See docs/cli.md for the contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from segfactory.cli._common import HomeOpt, JsonOpt, console, emit_json

label_app = typer.Typer(help="The labelling loop: auto-label, review, finetune.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(label_app, name="label")
    label_app.command("propose")(propose_cmd)


def propose_cmd(
    data: Annotated[Path, typer.Option("--data", help="A split folder (e.g. from `data import --unlabelled`).")],
    model: Annotated[Path | None, typer.Option("--model", help="A model.onnx (default: the current best).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Queue file (default: runs/labels/<hash>/).")] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Label images with the current best model: classical proposals, model masks, a confidence each."""
    from agents.labelling import propose_labels
    from audit import AuditLog
    from segfactory.errors import HomeError
    from segfactory.home import Home

    resolved = Home.resolve(home)
    if not resolved.exists():
        raise HomeError(f"no segfactory home at {resolved.root}; run `segfactory init` first")
    if model is not None and not model.is_file():
        from segfactory.errors import UsageError

        raise UsageError(f"--model {model} is not a file; give a model.onnx")
    with AuditLog(resolved, None) as log:  # anchored by the next writer that holds the gate's anchor
        queue, path = propose_labels(resolved, data, model=model, audit=log, out=out)
    confidences = [item.confidence for item in queue.items]
    summary = {"queue": str(path), "data": queue.data, "data_content_hash": queue.data_content_hash,
               "model": queue.model, "model_sha256": queue.model_sha256, "n_images": queue.n_images,
               "n_items": len(queue.items), "mean_confidence": sum(confidences) / len(confidences) if confidences else None}
    if json_out:
        emit_json(summary)
        return
    console().print(f"{summary['n_items']} proposed masks on {queue.n_images} images -> {path}")
