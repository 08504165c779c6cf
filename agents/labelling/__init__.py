"""The labelling loop (docs/labelling.md): propose, review in the console, finetune, next pass.

    from agents.labelling import FinetuneSetup, finetune_round, open_round, propose_labels
    queue, path = propose_labels(home, Path("unlabelled/"))   # the labelling model labels the images
    info = open_round(home, queue, path)                      # labels/vK + its console review queue
    ... a person keeps, fixes or drops each image at /labels/<info.ref> ...
    record = finetune_round(FinetuneSetup(home, audit_log, gate=client), info.ref)
    # record.model is the labelling model of the next pass; label_rounds(home) lists every round

The labelling model is the newest finetuned one (:func:`newest_model`), else the gate's current best.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agents.labelling._finetune import (
    LABEL_RUN,
    FinetuneSetup,
    LabelRound,
    finetune_round,
    label_rounds,
    newest_model,
    precision,
    render_report,
)
from agents.labelling._propose import (
    BOX_MARGIN_PX,
    THRESHOLD,
    QueueItem,
    ReviewQueue,
    decode_mask,
    propose,
)
from agents.labelling._round import RoundInfo, default_base, load_round, open_round, rounds
from gate.client import home_gate
from runner import default_scorer
from segfactory.errors import HomeError
from segfactory.home import Home
from segfactory.records import Actor, sha256_file
from synthetic.splits import read_split

BASELINE_MODEL = Path("runs") / "baseline" / "baseline-classical.onnx"  # written by `segfactory init`
PROMOTIONS_FILE = "promotions.jsonl"  # under runs/: every promoted model (agents.services)
QUEUES_DIR = Path("runs") / "labels"  # <home>/runs/labels/<content hash[:12]>/queue-<ts>.json


def current_best_model(home: Home) -> Path:
    """The host copy of the gate's current best (the ledger's head: a retraction counts), as the
    gate reports it: only the gate opens the vault."""

    if not home.vault.exists():
        raise HomeError(f"no gate vault at {home.vault}; run `segfactory init`, or pass --model")
    with home_gate(home.root) as client:
        best = client.status().current_best
    if not best:
        raise HomeError("the gate has no current best; `segfactory init` registers the baseline")
    for candidate in _known_models(home):
        if candidate.is_file() and sha256_file(candidate) == best:
            return candidate
    raise HomeError(f"the current best {str(best)[:12]}… has no host copy; pass --model")


def _known_models(home: Home) -> list[Path]:
    promotions = home.runs / PROMOTIONS_FILE
    rows = promotions.read_text().splitlines() if promotions.is_file() else []
    return [*(Path(json.loads(r)["model"]) for r in reversed(rows) if r.strip()), home.root / BASELINE_MODEL]


def propose_labels(
    home: Home,
    data: Path,
    *,
    model: Path | None = None,
    scorer: Any = None,
    audit: Any = None,
    out: Path | None = None,
) -> tuple[ReviewQueue, Path]:
    """Label the split at ``data`` with ``model`` (default: the newest finetuned model, else the current
    best); write the review queue."""

    proposer = home.root / BASELINE_MODEL
    if not proposer.is_file():
        raise HomeError(f"no classical detector at {proposer}; run `segfactory init`")
    model = model or newest_model(home) or current_best_model(home)
    split = read_split(data)
    images = np.asarray(split.images)
    hashes = [str(row.get("sha256", "")) for row in split.image_meta]
    items = propose(images, hashes, model, proposer, scorer or default_scorer)
    queue = ReviewQueue(
        data=str(Path(data).resolve()),
        data_content_hash=split.content_hash,
        model=str(model),
        model_sha256=sha256_file(model),
        proposer=str(proposer),
        n_images=len(split),
        items=items,
    )
    path = out or home.root / QUEUES_DIR / split.content_hash[:12] / f"queue-{int(queue.created)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(queue.model_dump_json(indent=1))
    if audit is not None:
        audit.append(
            Actor.SYSTEM,
            "labels_proposed",
            {
                "queue": str(path),
                "data": queue.data,
                "items": len(items),
                "data_content_hash": queue.data_content_hash,
                "model_sha256": queue.model_sha256,
            },
        )
    return queue, path


__all__ = [
    "BOX_MARGIN_PX",
    "LABEL_RUN",
    "THRESHOLD",
    "FinetuneSetup",
    "LabelRound",
    "QueueItem",
    "ReviewQueue",
    "RoundInfo",
    "current_best_model",
    "decode_mask",
    "default_base",
    "finetune_round",
    "label_rounds",
    "load_round",
    "newest_model",
    "open_round",
    "precision",
    "propose",
    "propose_labels",
    "render_report",
    "rounds",
]
