"""One ticket's state while it runs, and its route around the work: prepare, record, finish.

``execute_ticket`` (training) and ``package_ticket`` (packaging) differ only in what runs in
the sandbox. Both make the workspace and place the staged host-owned inputs beside it
(``prepare``), audit the start and record whatever the ticket ends as (``run_recorded``: a failure
is a recorded state), and end by copying the model out, computing the host's evidence and, when
a gate is given, submitting it (``finish``).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from runner import _staging
from runner._evidence import (
    GateSubmitter,
    Scorer,
    copy_curve,
    copy_outputs,
    discard_workspace,
    evidence,
    sandbox_report,
)
from runner._launch import SandboxLauncher, WorkerLauncher
from runner._manifest import TrainingManifest, training_manifest, write_manifest
from runner.outcome import Attempt, TicketOutcome, TicketStatus
from runner.scheduler import Scheduler
from segfactory.errors import DataError
from segfactory.files import write_atomic
from segfactory.home import Home
from segfactory.records import Actor, Ticket
from segfactory.seams import AuditSink
from synthetic.versions import DatasetVersion

BYTES_PER_PIXEL = 5  # a split in the worker's memory: a float32 image and a uint8 mask per pixel
MANIFEST_FILE = "manifest.json"  # the host-computed training manifest, in the ticket folder

log = logging.getLogger(__name__)


class TicketFailed(Exception):
    """A ticket ended without a model; the message is the recorded reason."""


@dataclass
class TicketRun:
    """State of one ticket while it executes (attempts survive a failure into the record)."""

    ticket: Ticket
    run_id: str
    dataset: DatasetVersion
    launcher: WorkerLauncher
    audit: AuditSink
    scheduler: Scheduler
    ticket_dir: Path
    attempts: list[Attempt] = field(default_factory=list)
    device_seconds: float = 0.0
    image_size: int = 0  # side of the training images, from the host-computed manifest
    data_bytes: int = 0  # the train and dev splits as the worker holds them (float32 images, uint8 masks)
    deadline: float | None = None  # time.monotonic() by which the run's wall ends; None: no wall
    progress: Callable[[str], None] | None = None  # people's progress lines (the CLI)
    inputs: StagedInputs | None = None  # host-owned files mounted read-only (init_from)

    @property
    def work(self) -> Path:
        return self.ticket_dir / "work"

    def event(self, event: str, payload: Mapping[str, object]) -> None:
        self.audit.append(Actor.RUNNER, event, {"ticket_id": self.ticket.id, **payload}, run_id=self.run_id)


class StagedRecord(TypedDict):
    """What the audit keeps of a ticket's staged inputs (``StagedInputs.record``)."""

    files: dict[str, str]  # name in the staging folder -> sha256
    mount: str
    staged_s: float
    verified_s: float


@dataclass
class StagedInputs:
    """A staging folder of host-owned files, its name in the ticket folder, where it is mounted
    and the hash of every file in it (checked again before each start)."""

    folder: Path
    name: str
    mount: str
    hashes: dict[str, str]
    staged_s: float = 0.0  # host time to check and copy the files in
    verified_s: float = 0.0  # host time spent hashing them again before the starts

    def place(self, ticket_dir: Path) -> None:
        self.folder = _staging.place(self.folder, ticket_dir, self.name)

    def verify(self) -> None:
        t0 = time.perf_counter()
        _staging.verify(self.folder, self.hashes)
        self.verified_s += time.perf_counter() - t0

    def record(self) -> StagedRecord:
        """What the audit keeps of them: hashes and the host's staging times."""
        return {
            "files": dict(self.hashes),
            "mount": self.mount,
            "staged_s": round(self.staged_s, 4),
            "verified_s": round(self.verified_s, 4),
        }


def run_recorded(
    run: TicketRun,
    started: float,
    start_payload: Mapping[str, object],
    body: Callable[[], TicketOutcome],
    recorded: Mapping[str, object],
) -> TicketOutcome:
    """Audit the start, run ``body`` (any failure is a recorded state), write and audit the outcome.

    ``recorded``: fields set on the outcome whatever it ended as (its host-owned inputs)."""
    run.event(
        "ticket_started",
        {
            "backend": run.launcher.name,
            "dataset": run.dataset.ref,
            "budget": run.ticket.budget.model_dump(),
            **start_payload,
            **({"cpus": run.scheduler.cpu_share()} if run.scheduler.cpu_share() is not None else {}),
        },
    )
    try:
        outcome = body()
    except Exception as exc:  # the ticket boundary: a failure is a recorded state
        outcome = failed(run, exc)
    finally:
        if run.inputs is not None and run.inputs.folder.parent != run.ticket_dir:
            _staging.discard(run.inputs.folder)  # never placed: the ticket failed before its folder
    update = {"wall_seconds": round(time.monotonic() - started, 3), **recorded}
    outcome = outcome.model_copy(update=update)
    write_outcome(run.ticket_dir, outcome)
    run.event("ticket_" + outcome.status.value.lower(), outcome.model_dump(mode="json"))
    return outcome


def refuse(ticket: Ticket, run_id: str, audit: AuditSink, reason: str) -> TicketOutcome:
    outcome = TicketOutcome(ticket_id=ticket.id, run_id=run_id, status=TicketStatus.REFUSED, reason=reason)
    audit.append(Actor.RUNNER, "ticket_refused", {"ticket_id": ticket.id, "reason": reason}, run_id=run_id)
    log.info("ticket %s refused: %s", ticket.id, reason)
    return outcome


def prepare(run: TicketRun, materialise: Callable[[], None]) -> TrainingManifest:
    """Make the workspace, place the staged inputs beside it, and compute the training manifest."""
    materialise()
    if run.inputs is not None:
        run.inputs.place(run.ticket_dir)
    manifest = training_manifest(run.dataset.train, run.dataset.dev)
    check_version(run.dataset, manifest)
    write_manifest(manifest, run.ticket_dir / MANIFEST_FILE)
    run.image_size = max(manifest.train.shape)
    run.data_bytes = sum(
        d.count * d.shape[0] * d.shape[1] * BYTES_PER_PIXEL for d in (manifest.train, manifest.dev)
    )
    return manifest


def finish(
    run: TicketRun,
    manifest: TrainingManifest,
    threshold: float,
    scorer: Scorer,
    gate: GateSubmitter | None,
    *,
    checkpoint: bool,
) -> TicketOutcome:
    """Copy the outputs out, compute the evidence at ``threshold``, and submit when a gate is given."""
    copied = copy_outputs(run.work, run.ticket_dir, checkpoint=checkpoint)
    weights = copied.checkpoint
    run.event(
        "model_copied_out",
        {
            "sha256": copied.model.sha256,
            "bytes": copied.model.size,
            **({"checkpoint_sha256": weights.sha256, "checkpoint_bytes": weights.size} if weights else {}),
        },
    )
    reported, truncated = sandbox_report(run.work)
    copy_curve(run.work, run.ticket_dir)
    # the host keeps what it copied out; the rest of the workspace (data, scratch) goes now
    run.event("workspace_removed", {"complete": discard_workspace(run.work)})
    found = evidence(copied, manifest, run.ticket_dir / MANIFEST_FILE, run.dataset.dev, threshold, scorer)
    run.event("evidence_computed", found.model_dump(mode="json"))
    done = TicketOutcome(
        ticket_id=run.ticket.id,
        run_id=run.run_id,
        status=TicketStatus.DONE,
        attempts=run.attempts,
        device_seconds=round(run.device_seconds, 3),
        evidence=found,
        sandbox_reported=reported,
        sandbox_reported_truncated=truncated,
    )
    return done if gate is None else submit(run, done, copied.model.path, gate)


def submit(run: TicketRun, done: TicketOutcome, model: Path, gate: GateSubmitter) -> TicketOutcome:
    try:
        verdict = gate.submit(
            model,
            run.dataset.ref,
            run.ticket.id,
            replicate_of=run.ticket.replicate_of,
            run_id=run.run_id,
        )
    except Exception as exc:  # the evidence stands; only the submission failed
        record = failed(run, exc)
        return done.model_copy(
            update={
                "status": TicketStatus.FAILED,
                "traceback_ref": record.traceback_ref,
                "reason": f"gate submission failed: {record.reason}",
            }
        )
    return done.model_copy(update={"verdict": verdict})


def check_version(dataset: DatasetVersion, manifest: TrainingManifest) -> None:
    for name, digest in (("train", manifest.train), ("dev", manifest.dev)):
        recorded = dataset.split_hashes.get(name)
        if recorded is not None and recorded != digest.content_hash:
            raise DataError(
                f"dataset version {dataset.ref}: the {name} split's content hash is "
                f"{digest.content_hash[:12]}..., version.json says {recorded[:12]}...; "
                "the version was modified after it was written"
            )


def failed(run: TicketRun, exc: Exception) -> TicketOutcome:
    text = "".join(traceback.format_exception(exc))
    ref = run.audit.put_blob(text.encode())
    reason = str(exc) if isinstance(exc, TicketFailed) else f"{type(exc).__name__}: {exc}"
    log.warning("ticket %s failed: %s", run.ticket.id, reason)
    return TicketOutcome(
        ticket_id=run.ticket.id,
        run_id=run.run_id,
        status=TicketStatus.FAILED,
        reason=reason[:2000],
        traceback_ref=ref,
        attempts=run.attempts,
        device_seconds=round(run.device_seconds, 3),
    )


def write_outcome(ticket_dir: Path, outcome: TicketOutcome) -> None:
    if not ticket_dir.is_dir():
        return
    write_atomic(ticket_dir / "outcome.json", outcome.model_dump_json(indent=2) + "\n")


def profile_of(home: Home) -> str:
    try:
        return str(home.info().get("profile", "default"))
    except Exception:  # no home marker: the default profile's budgets
        return "default"


def launcher_for(backend: WorkerLauncher | str) -> WorkerLauncher:
    if isinstance(backend, str):
        return SandboxLauncher(backend)
    return backend
