"""``label finetune``: train on what survived review, measure the round, record it.

The reviewed images (kept: the proposed mask; fixed: the person's mask; dropped or undecided:
left out) join the base version's train split, ahead of it, as the next version of the round's
dataset (approved: a person reviewed it). A ticket (arm ``label``) trains on it through the runner, in
the sandbox, from the run profile's base config; the host computes its dev metrics, and with a
gate client the model is submitted (one confirm-a query, a coarse verdict). The round record
(:class:`LabelRound`) holds the figures the issue asks for: auto-label precision against the
person's decisions, human minutes per image, labels per hour, and the gain over the model that
proposed the round (host dev object F1 on the base dev split, and the gate's verdict).
Records go to ``runs/labels/people/rounds.jsonl`` and ``report.md`` (people only).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agents.labelling._propose import THRESHOLD, ReviewQueue, decode_mask
from agents.labelling._round import RoundInfo, load_round
from agents.labelling.decisions import decisions
from agents.run_policy import load_run_defaults
from runner import TicketRunner, default_scorer
from segfactory.errors import DataError
from segfactory.home import SOURCE_ROOT, Home
from segfactory.records import Actor, Arm, Ticket, TicketKind
from synthetic.exchange import component_rows
from synthetic.splits import read_split, write_split
from synthetic.versions import create_version, resolve
from vision.metrics import aggregate, per_image_metrics

LABEL_RUN = "labels"  # run id of labelling tickets: runs/labels/tickets/, runs/labels/people/
ROUNDS_FILE = "rounds.jsonl"  # runs/labels/people/rounds.jsonl: one LabelRound a line
REPORT_FILE = "report.md"  # runs/labels/people/report.md: the rounds as a table
FIX_OVERLAP = 0.5  # a proposal in a fixed image was right when this share of its pixels stayed a void


class LabelRound(BaseModel):
    """One finished labelling round: its review figures and the gain of its finetuned model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    round: str  # NAME/vK that was reviewed
    reviewed_version: str  # NAME/vK+1: base train + the surviving labels
    proposer_sha256: str
    n_images: int
    n_proposed: int
    reviewed: int
    kept: int
    fixed: int
    dropped: int
    precision: float | None  # proposed masks judged right / proposed masks on reviewed images
    human_seconds: float
    human_minutes_per_image: float | None
    labels_per_hour: float | None  # surviving images (kept + fixed) per hour of review
    ticket_id: str
    status: str  # the finetune ticket's status (DONE, FAILED, REFUSED)
    reason: str | None = None
    model: str | None = None  # the finetuned model.onnx: it makes the next pass
    model_sha256: str | None = None
    device_seconds: float = 0.0
    dev_object_f1: float | None = None
    proposer_dev_object_f1: float | None = None
    dev_gain: float | None = None
    gate_verdict: str | None = None  # WIN | NO_WIN | INVALID | BUDGET_EXHAUSTED; None: not submitted
    created: float = Field(default_factory=time.time)


@dataclass
class FinetuneSetup:
    """What a finetune needs; ``backend`` is a sandbox name or a ``runner.WorkerLauncher``."""

    home: Home
    audit: Any  # segfactory.seams.AuditSink (audit.AuditLog)
    backend: Any = "bwrap"
    gate: Any = None  # gate.client.GateClient: submit the finetuned model (None: host dev metrics only)
    scheduler: Any = None
    scorer: Any = None  # runner.Scorer; None: runner.default_scorer
    epochs: int | None = None  # None: the run profile's ticket epochs (policies/run.yaml)


def finetune_round(setup: FinetuneSetup, ref: str) -> LabelRound:
    """Finetune on the reviewed labels of round ``ref``; DataError when nothing survived review."""

    home = setup.home
    info = load_round(home, ref)
    decided = [d for d in decisions(home, ref) if d.split == "train"]
    surviving = [d for d in decided if d.action in ("keep", "fix")]
    if not surviving:
        raise DataError(
            f"no reviewed labels on {ref}: {len(decided)} decisions, none kept or fixed; keep or fix "
            f"images in the console (/labels/{ref}) before finetuning"
        )
    queue = ReviewQueue.model_validate_json(Path(info.queue).read_text())
    version = _reviewed_version(home, info, surviving)
    outcome = _train(setup, version, info)
    record = _record(setup, info, queue, decided, version.ref, outcome)
    _write(home, record)
    setup.audit.append(Actor.SYSTEM, "label_round", record.model_dump(mode="json"), run_id=LABEL_RUN)
    return record


def _reviewed_version(home: Home, info: RoundInfo, surviving: list[Any]) -> Any:
    """Base train + the surviving labels, as the next version of the round's dataset (approved)."""

    base, proposed = (
        read_split(resolve(home.root, info.base).train),
        read_split(resolve(home.root, info.ref).train),
    )
    idx = [d.image_id for d in surviving]
    new_masks = np.stack([d.mask if d.mask is not None else proposed.masks[d.image_id] for d in surviving])
    new_images = np.asarray(proposed.images)[idx]
    # reviewed images first: a host cap on training images (max_train_images) keeps the first rows
    images = np.concatenate([new_images, np.asarray(base.images)])
    masks = np.concatenate([new_masks.astype(np.uint8), np.asarray(base.masks)])
    meta = [*({**proposed.image_meta[i], "labelled_by": "review"} for i in idx), *base.image_meta]
    defects = [
        *(row for k in range(len(idx)) for row in component_rows(k, images[k], masks[k])),
        *(_shifted(d, len(idx)) for d in base.defects),
    ]
    manifest = {
        "generator": base.manifest.get("generator", "import"),
        "kind": "reviewed",
        "parent": proposed.content_hash,
        "label_review": {"round": info.ref, "base": info.base, "images": idx},
    }
    name = info.ref.split("/", 1)[0]
    with tempfile.TemporaryDirectory(prefix=".label-finetune-", dir=home.datasets) as tmp:
        train = write_split(Path(tmp) / "train", images, masks, meta, defects, manifest)
        return create_version(
            home.root, name, {"train": train, "dev": None}, parent=info.ref, approve_it=True
        )


def _shifted(defect: dict[str, object], by: int) -> dict[str, object]:
    """A defect row after ``by`` rows were put ahead of its image (an id string needs no change);
    its other keys pass through as they are."""
    image_id = defect.get("image_id")
    return {**defect, "image_id": image_id + by} if isinstance(image_id, int) else defect


def _train(setup: FinetuneSetup, version: Any, info: RoundInfo) -> Any:
    profile = str(setup.home.info().get("profile", "default"))
    defaults = load_run_defaults(profile)
    epochs = setup.epochs or defaults.ticket.epochs
    ticket = Ticket(
        id=f"label-{version.name}-{version.version}-{os.urandom(2).hex()}"[:64],
        arm=Arm.LABEL,
        kind=TicketKind.CONFIG,
        hypothesis=f"finetune on the labels reviewed in {info.ref}",
        change={"epochs": epochs},
        budget=defaults.ticket.model_copy(update={"epochs": epochs}),
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=int.from_bytes(os.urandom(4), "little") % 2**31,
    )
    runner = TicketRunner(
        setup.home,
        setup.backend,
        setup.audit,
        run_id=LABEL_RUN,
        scheduler=setup.scheduler,
        scorer=setup.scorer,
    )
    outcome = runner.run(ticket, version, SOURCE_ROOT / defaults.base_config)
    if setup.gate is None or outcome.evidence is None:
        return outcome
    model = (
        setup.home.tickets_dir(LABEL_RUN) / ticket.id / "model.onnx"
    )  # the gate checks the data by its ref
    verdict = setup.gate.submit(model, version.ref, ticket.id, run_id=LABEL_RUN)
    return outcome.model_copy(update={"verdict": verdict})


def _record(
    setup: FinetuneSetup, info: RoundInfo, queue: ReviewQueue, decided: list[Any], reviewed: str, outcome: Any
) -> LabelRound:
    counts = {a: sum(1 for d in decided if d.action == a) for a in ("keep", "fix", "drop")}
    seconds = sum(d.seconds for d in decided)
    ok = outcome.evidence is not None
    model = setup.home.tickets_dir(LABEL_RUN) / outcome.ticket_id / "model.onnx"
    new_f1 = float(outcome.evidence.dev_metrics["object_f1"]) if ok else None
    old_f1 = _dev_f1(setup, Path(info.model), info.base) if ok else None
    return LabelRound(
        round=info.ref,
        reviewed_version=reviewed,
        proposer_sha256=info.model_sha256,
        n_images=queue.n_images,
        n_proposed=len(queue.items),
        reviewed=len(decided),
        kept=counts["keep"],
        fixed=counts["fix"],
        dropped=counts["drop"],
        precision=precision(queue, decided),
        human_seconds=round(seconds, 3),
        human_minutes_per_image=round(seconds / 60 / len(decided), 4) if decided else None,
        labels_per_hour=round((counts["keep"] + counts["fix"]) * 3600 / seconds, 1) if seconds > 0 else None,
        ticket_id=outcome.ticket_id,
        status=outcome.status.value,
        reason=outcome.reason,
        model=str(model) if ok else None,
        model_sha256=outcome.evidence.model_sha256 if ok else None,
        device_seconds=outcome.device_seconds,
        dev_object_f1=new_f1,
        proposer_dev_object_f1=old_f1,
        dev_gain=round(new_f1 - old_f1, 4) if new_f1 is not None and old_f1 is not None else None,
        gate_verdict=outcome.verdict.verdict.value if outcome.verdict is not None else None,
    )


def precision(queue: ReviewQueue, decided: list[Any]) -> float | None:
    """Share of proposed masks on reviewed images that the person's decision confirms.

    keep: every proposal right; drop: every proposal wrong; fix: a proposal is right when at least
    ``FIX_OVERLAP`` of its pixels are void in the person's mask. None when no proposal was reviewed.
    """
    by_image = {d.image_id: d for d in decided}
    right = total = 0
    for item in queue.items:
        d = by_image.get(item.image_index)
        if d is None:
            continue
        total += 1
        if d.action == "keep":
            right += 1
        elif d.action == "fix" and d.mask is not None:
            mask = decode_mask(item, d.mask.shape)
            right += int((d.mask[mask] > 0).sum() >= FIX_OVERLAP * item.area)
    return round(right / total, 4) if total else None


def _dev_f1(setup: FinetuneSetup, model: Path, base: str) -> float | None:
    """The proposer's object F1 on the base dev split, through the confined scorer (None: no model)."""

    if not model.is_file():
        return None
    dev = read_split(resolve(setup.home.root, base).dev)
    prob = np.asarray((setup.scorer or default_scorer)(model, np.asarray(dev.images)))[:, 0]
    return float(aggregate(per_image_metrics(prob, np.asarray(dev.masks), threshold=THRESHOLD))["object_f1"])


def label_rounds(home: Home) -> list[LabelRound]:
    """Every finished round, oldest first."""
    path = home.people_dir(LABEL_RUN) / ROUNDS_FILE
    lines = path.read_text().splitlines() if path.is_file() else []
    return [LabelRound.model_validate_json(line) for line in lines if line.strip()]


def newest_model(home: Home) -> Path | None:
    """The newest finetuned model (it makes the next pass); None before the first finetune."""
    for record in reversed(label_rounds(home)):
        if record.model and Path(record.model).is_file():
            return Path(record.model)
    return None


def _write(home: Home, record: LabelRound) -> None:
    people = home.people_dir(LABEL_RUN)
    people.mkdir(parents=True, exist_ok=True)
    with (people / ROUNDS_FILE).open("a") as fh:
        fh.write(record.model_dump_json() + "\n")
    (people / REPORT_FILE).write_text(render_report(label_rounds(home)))


def _f(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render_report(records: list[LabelRound]) -> str:
    """The labelling report: one row per round (people only)."""
    head = [
        "round",
        "reviewed",
        "kept",
        "fixed",
        "dropped",
        "precision",
        "human min/image",
        "labels/hour",
        "proposer dev F1",
        "finetuned dev F1",
        "gain",
        "gate",
        "status",
    ]
    lines = [
        "# Labelling rounds",
        "",
        "Precision: proposed masks the person's decision confirmed "
        "(keep: right, drop: wrong, fix: right when half its pixels stayed void).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in records:
        cells = [
            r.round,
            r.reviewed,
            r.kept,
            r.fixed,
            r.dropped,
            r.precision,
            r.human_minutes_per_image,
            r.labels_per_hour,
            r.proposer_dev_object_f1,
            r.dev_object_f1,
            r.dev_gain,
            r.gate_verdict,
            r.status,
        ]
        lines.append("| " + " | ".join(_f(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
