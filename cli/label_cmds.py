"""CLI: ``segfactory label propose --data D`` and ``label finetune``. See docs/cli.md for the contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agents.labelling import (
    FinetuneSetup,
    finetune_round,
    label_rounds,
    open_round,
    propose_labels,
    render_report,
    rounds,
)
from audit import AuditLog
from audit.gate_events import pull
from cli._common import BackendOpt, HomeOpt, JsonOpt, console, emit_json
from gate.client import running_gate
from segfactory.errors import HomeError, UsageError
from segfactory.home import Home
from synthetic.versions import resolve

label_app = typer.Typer(help="The labelling loop: auto-label, review, finetune.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(label_app, name="label")
    label_app.command("propose")(propose_cmd)
    label_app.command("finetune")(finetune_cmd)
    label_app.command("report")(report_cmd)


def _home(home: Path | None) -> Any:
    resolved = Home.resolve(home)
    if not resolved.exists():
        raise HomeError(f"no segfactory home at {resolved.root}; run `segfactory init` first")
    return resolved


def propose_cmd(
    data: Annotated[
        Path, typer.Option("--data", help="A split folder (e.g. from `data import --unlabelled`).")
    ],
    model: Annotated[
        Path | None,
        typer.Option(
            "--model", help="A model.onnx (default: the newest finetuned model, else the current best)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Queue file (default: runs/labels/<hash>/).")
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            help="Labelled version NAME/vK the round joins and is judged on (default: the home's init data).",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="Dataset name of the round's versions.")] = "labels",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Label images: classical proposals, model masks, a confidence each; open a round for the console."""
    resolved = _home(home)
    if model is not None and not model.is_file():
        raise UsageError(f"--model {model} is not a file; give a model.onnx")
    base_version = resolve(resolved.root, base) if base else None
    with AuditLog(resolved, None) as log:  # anchored by the next writer that holds the gate's anchor
        queue, path = propose_labels(resolved, data, model=model, audit=log, out=out)
        info = open_round(resolved, queue, path, base=base_version, name=name)
        log.append("system", "label_round_opened", info.model_dump(mode="json"))
    confidences = [item.confidence for item in queue.items]
    summary = {
        "queue": str(path),
        "data": queue.data,
        "data_content_hash": queue.data_content_hash,
        "model": queue.model,
        "model_sha256": queue.model_sha256,
        "n_images": queue.n_images,
        "n_items": len(queue.items),
        "mean_confidence": sum(confidences) / len(confidences) if confidences else None,
        "round": info.ref,
        "base": info.base,
        "review": f"/labels/{info.ref}",
    }
    if json_out:
        emit_json(summary)
        return
    console().print(
        f"{summary['n_items']} proposed masks on {queue.n_images} images -> round {info.ref}; "
        f"review them in the console at /labels/{info.ref}"
    )


def finetune_cmd(
    round_ref: Annotated[
        str | None, typer.Option("--round", help="The reviewed round NAME/vK (default: the newest round).")
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate/--no-gate", help="Submit the finetuned model to the gate (one confirm-a query)."
        ),
    ] = True,
    epochs: Annotated[
        int | None,
        typer.Option(
            "--epochs",
            min=1,
            help="Training epochs (default: the profile's ticket epochs, policies/run.yaml).",
        ),
    ] = None,
    backend: BackendOpt = "bwrap",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Train on the labels that survived review; record the round (precision, minutes, gain)."""
    resolved = _home(home)
    if round_ref is None:
        known = rounds(resolved)
        if not known:
            raise UsageError("no labelling round in this home; `segfactory label propose --data D` opens one")
        round_ref = known[-1].ref
    with AuditLog(resolved, None) as log:
        record = _finetune(FinetuneSetup(resolved, log, backend=backend, epochs=epochs), round_ref, gate)
    summary = record.model_dump(mode="json")
    if json_out:
        emit_json(summary)
        return
    out = console()
    out.print(
        f"round {record.round}: {record.reviewed} reviewed, precision {record.precision}, "
        f"{record.human_minutes_per_image} human min/image, {record.labels_per_hour} labels/hour"
    )
    out.print(
        f"finetune {record.ticket_id}: {record.status}; dev object F1 {record.dev_object_f1} "
        f"(proposer {record.proposer_dev_object_f1}); gate {record.gate_verdict or 'not asked'}"
    )


def _finetune(setup: Any, round_ref: str, gate: bool) -> Any:
    if not gate:
        return finetune_round(setup, round_ref)

    with running_gate(setup.home.root) as client:
        setup.gate = client
        record = finetune_round(setup, round_ref)
        pull(client, setup.audit)
    return record


def report_cmd(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """The labelling report: every finished round's figures (runs/labels/people/report.md)."""
    records = label_rounds(_home(home))
    if json_out:
        emit_json({"rounds": [r.model_dump(mode="json") for r in records]})
        return
    console().print(render_report(records))
