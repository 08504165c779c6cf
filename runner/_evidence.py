"""What the host computes once a sandbox has written its model (trust rule 6), and the submission.

The model (and, where the trainer wrote one, its checkpoint) is copied out of the workspace
beneath its root; dev metrics come from the copy through the gate's intake and confined scorer;
the worker's ``result.json`` is kept as its claim only. Shared by training and packaging tickets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from gate.intake import inspect_model
from gate.scorer import score_checked
from runner._copyout import MAX_MODEL_BYTES, CopiedFile, copy_out, read_beneath
from runner._manifest import TrainingManifest
from runner._progress import CURVE_CAP_BYTES, CURVE_PATH
from runner._workspace import OUT_DIR
from runner.inputs import CHECKPOINT_FILE, MODEL_FILE
from runner.outcome import Evidence
from segfactory.errors import DataError, LimitExceeded
from segfactory.files import remove_tree
from segfactory.layout import TicketFiles
from segfactory.records import CoarseVerdict
from synthetic.splits import read_split
from vision.metrics import aggregate, per_image_metrics

MAX_CHECKPOINT_BYTES = MAX_MODEL_BYTES  # model.safetensors; past this: LimitExceeded, the ticket fails
RESULT_FILE = "result.json"

log = logging.getLogger(__name__)

Scorer = Callable[[Path, np.ndarray], np.ndarray]  # (model path, images (N, H, W)) -> prob (N, 1, H, W)


class GateSubmitter(Protocol):
    """The gate as the runner uses it (``gate.client.GateClient`` satisfies it)."""

    def submit(
        self,
        model_path: Path | str,
        train_data: str | None,
        ticket_id: str,
        replicate_of: str | None = None,
        run_id: str | None = None,
    ) -> CoarseVerdict: ...


def default_scorer(model_path: Path, images: np.ndarray) -> np.ndarray:
    """Intake checks on the copied model, then the gate's confined scorer (no vault involved)."""

    return score_checked(inspect_model(model_path), images)


@dataclass(frozen=True)
class CopiedOut:
    """The files taken out of a finished workspace."""

    model: CopiedFile
    checkpoint: CopiedFile | None  # None: the worker wrote none (classical, nnU-Net, packaging)


def copy_outputs(work: Path, ticket_dir: Path, *, checkpoint: bool) -> CopiedOut:
    """``out/model.onnx`` and, when asked and present, ``out/model.safetensors`` (the weights a
    child may continue from; the host only hashes it) into the ticket folder."""
    model = copy_out(work, f"{OUT_DIR}/{MODEL_FILE}", ticket_dir / MODEL_FILE, cap=MAX_MODEL_BYTES)
    weights = None
    if checkpoint:
        try:
            weights = copy_out(
                work, f"{OUT_DIR}/{CHECKPOINT_FILE}", ticket_dir / CHECKPOINT_FILE, cap=MAX_CHECKPOINT_BYTES
            )
        except FileNotFoundError:
            weights = None
    return CopiedOut(model, weights)


def copy_curve(work: Path, ticket_dir: Path) -> bool:
    """``out/learning_curve.jsonl`` into the ticket folder (``TicketFiles.curve``: people's plot of the
    worker's own report, never evidence); False when it is absent, unsafe or past its cap."""
    try:
        copy_out(work, CURVE_PATH, TicketFiles(ticket_dir).curve, cap=CURVE_CAP_BYTES)
    except (OSError, DataError, LimitExceeded) as exc:
        log.info("no learning curve copied out of %s: %s", work, exc)
        return False
    return True


def discard_workspace(work: Path) -> bool:
    """Remove a finished ticket's workspace once copy-out has taken what the host keeps, so that
    a run of many tickets does not leave each one's data, checkpoints and scratch behind on the
    filesystem the vault and the audit log share. Links are removed without following them, at
    any depth (``segfactory.files.remove_tree``); what cannot be removed is left and logged."""
    failures = remove_tree(work)
    if failures:
        log.warning("workspace %s kept in part: %s", work, "; ".join(failures[:3]))
    return not failures


def evidence(
    copied: CopiedOut,
    manifest: TrainingManifest,
    manifest_file: Path,
    dev_dir: Path,
    threshold: float,
    scorer: Scorer,
) -> Evidence:
    """The host-computed evidence of a copied-out model on the dev split at ``threshold``."""
    return Evidence(
        model_sha256=copied.model.sha256,
        model_bytes=copied.model.size,
        manifest=manifest.summary(),
        manifest_file=str(manifest_file),
        dev_metrics=dev_metrics(copied.model.path, dev_dir, threshold, scorer),
        threshold=threshold,
        checkpoint_sha256=copied.checkpoint.sha256 if copied.checkpoint else None,
        checkpoint_bytes=copied.checkpoint.size if copied.checkpoint else None,
    )


def sandbox_report(work: Path) -> tuple[dict[str, object] | None, bool]:
    """The worker's result.json, kept as its claim only; None when absent or unsafe."""
    try:
        data, truncated = read_beneath(work, f"{OUT_DIR}/{RESULT_FILE}")
    except (OSError, DataError):
        return None, False
    try:
        parsed = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"unparsed": data.decode("utf-8", errors="replace")}, truncated
    return (parsed if isinstance(parsed, dict) else {"value": parsed}), truncated


def dev_metrics(model_path: Path, dev_dir: Path, threshold: float, scorer: Scorer) -> dict[str, float]:
    dev = read_split(dev_dir)
    prob = np.asarray(scorer(model_path, dev.images))  # (N, 1, H, W)
    if prob.shape != (len(dev), 1, *dev.images.shape[1:]):
        raise DataError(
            f"scorer returned shape {prob.shape} for {len(dev)} dev images of {dev.images.shape[1:]}"
        )
    return aggregate(per_image_metrics(prob[:, 0], dev.masks, threshold=threshold))
