"""Executing one ticket: refuse or materialise, train in the sandbox, copy out, compute evidence.

Order: policy checks before anything starts (REFUSED);
the workspace ``runs/<run>/tickets/<id>/work/`` with ``config.yaml`` (and, for code tickets, a
copy of the training code); the training manifest from the dataset version the host mounts;
the worker in the sandbox, admitted by the scheduler and killed past its device-second budget,
retried at half the batch after an OOM; ``model.onnx`` copied out beneath the workspace; dev
metrics from the copied model through the confined scorer; then, when a gate is given, the
submission. Any error after the start is caught here and recorded as FAILED.
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gate.intake import inspect_model
from gate.scorer import score_checked
from runner import _workspace
from runner._copyout import MAX_MODEL_BYTES, copy_out, read_beneath
from runner._launch import (
    LaunchRequest,
    SandboxLauncher,
    WorkerLauncher,
    audit_sandbox_events,
    keep_host_config,
    output_record,
)
from runner._manifest import TrainingManifest, training_manifest, write_manifest
from runner._policy import refusal_reason
from runner._progress import PROGRESS_FILE, CurveWatcher
from runner._workspace import OUT_DIR
from runner.outcome import Attempt, Evidence, TicketOutcome, TicketStatus
from runner.scheduler import Scheduler, is_oom, shrink_for_oom
from segfactory.budgets import TicketCaps, ticket_caps
from segfactory.errors import DataError
from segfactory.files import write_atomic
from segfactory.home import Home
from segfactory.records import Actor, CoarseVerdict, Ticket
from segfactory.seams import AuditSink
from synthetic.splits import appended_images, read_split
from synthetic.versions import DatasetVersion
from vision.metrics import aggregate, per_image_metrics

TIMEOUT_MARGIN_S = 30.0  # added to the remaining device-second budget per attempt (start-up, export)
MIN_WALL_S = 30.0  # a ticket is not started with less of the run's wall time left than this
BYTES_PER_PIXEL = 5  # a split in the worker's memory: a float32 image and a uint8 mask per pixel
MODEL_FILE = "model.onnx"
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


class TicketFailed(Exception):
    """A ticket ended without a model; the message is the recorded reason."""


@dataclass
class _Run:
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

    @property
    def work(self) -> Path:
        return self.ticket_dir / "work"

    def event(self, event: str, payload: dict[str, Any]) -> None:
        self.audit.append(Actor.RUNNER, event, {"ticket_id": self.ticket.id, **payload}, run_id=self.run_id)


def default_scorer(model_path: Path, images: np.ndarray) -> np.ndarray:
    """Intake checks on the copied model, then the gate's confined scorer (no vault involved)."""

    return score_checked(inspect_model(model_path), images)


def execute_ticket(
    ticket: Ticket,
    *,
    home: Home,
    dataset_version: DatasetVersion,
    backend: WorkerLauncher | str,
    base_config: dict[str, Any] | Path,
    audit: AuditSink,
    gate: GateSubmitter | None = None,
    run_id: str = "adhoc",
    scheduler: Scheduler | None = None,
    scorer: Scorer = default_scorer,
    budget_policy: TicketCaps | None = None,
    progress: Callable[[str], None] | None = None,
    wall_left_s: float | None = None,
) -> TicketOutcome:
    """Run ``ticket`` end to end and return its recorded outcome; never raises for a bad ticket.

    ``wall_left_s``: what is left of the run's wall time; the worker gets no more than that, and a
    ticket is not started with less than ``MIN_WALL_S``. ``progress`` receives a line per epoch
    the worker reports while it trains (the sandbox's claim, for people)."""
    started = time.monotonic()
    policy = budget_policy or ticket_caps(_profile_of(home))
    config, reason = _checked_config(ticket, dataset_version, base_config, policy)
    ticket_dir = home.tickets_dir(run_id) / ticket.id
    if reason is None and ticket_dir.exists():
        reason = f"ticket {ticket.id} already has a folder in run {run_id}; ticket ids are unique per run"
    if reason is not None or config is None:
        return _refuse(ticket, run_id, audit, reason or "invalid config")
    launcher = _launcher(backend)
    run = _Run(
        ticket,
        run_id,
        dataset_version,
        launcher,
        audit,
        scheduler or Scheduler.for_home(home),
        ticket_dir,
        deadline=None if wall_left_s is None else started + wall_left_s,
        progress=progress,
    )
    share = run.scheduler.cpu_share()
    if share is not None:  # several tickets at once on the CPU: this one trains on its share of the cores
        config = {**config, "threads": min(int(config.get("threads") or share), share)}
    run.event(
        "ticket_started",
        {
            "backend": launcher.name,
            "dataset": dataset_version.ref,
            "budget": ticket.budget.model_dump(),
            "config": config,
            **({"cpus": share} if share is not None else {}),
        },
    )
    try:
        outcome = _execute(run, config, scorer, gate)
    except Exception as exc:  # the ticket boundary: a failure is a recorded state
        outcome = _failed(run, exc)
    outcome = outcome.model_copy(update={"wall_seconds": round(time.monotonic() - started, 3)})
    _write_outcome(ticket_dir, outcome)
    run.event("ticket_" + outcome.status.value.lower(), outcome.model_dump(mode="json"))
    return outcome


@dataclass(frozen=True)
class TicketRunner:
    """The runner's collaborators, held once; ``run`` executes one ticket with them.

    The loop's services, the controls, the challenge and the labelling finetune each hold one
    instead of repeating ``execute_ticket``'s keywords at every call. ``scorer`` None is the
    gate's confined scorer; ``budget_policy`` None is the home profile's ticket caps.
    """

    home: Home
    backend: WorkerLauncher | str
    audit: AuditSink
    run_id: str = "adhoc"
    gate: GateSubmitter | None = None
    scheduler: Scheduler | None = None
    scorer: Scorer | None = None
    budget_policy: TicketCaps | None = None
    progress: Callable[[str], None] | None = None

    def run(
        self,
        ticket: Ticket,
        dataset_version: DatasetVersion,
        base_config: dict[str, Any] | Path,
        *,
        wall_left_s: float | None = None,
    ) -> TicketOutcome:
        return execute_ticket(
            ticket,
            home=self.home,
            dataset_version=dataset_version,
            backend=self.backend,
            base_config=base_config,
            audit=self.audit,
            gate=self.gate,
            run_id=self.run_id,
            scheduler=self.scheduler,
            scorer=self.scorer or default_scorer,
            budget_policy=self.budget_policy,
            progress=self.progress,
            wall_left_s=wall_left_s,
        )


def _profile_of(home: Home) -> str:
    try:
        return str(home.info().get("profile", "default"))
    except Exception:  # no home marker: the default profile's budgets
        return "default"


def _launcher(backend: WorkerLauncher | str) -> WorkerLauncher:
    if isinstance(backend, str):
        return SandboxLauncher(backend)
    return backend


def _checked_config(
    ticket: Ticket, dataset: DatasetVersion, base: dict[str, Any] | Path, policy: TicketCaps
) -> tuple[dict[str, Any] | None, str | None]:
    """(validated config, None), or (None, why the ticket is refused)."""
    reason = refusal_reason(ticket, policy)
    if reason is None and not dataset.approved:
        reason = f"dataset version {dataset.ref} is not approved; approve it before training on it"
    if reason is not None:
        return None, reason
    try:
        config = _workspace.ticket_config(base, ticket)
    except Exception as exc:  # UsageError from the config model, or a malformed base config
        return None, f"the ticket's config change is invalid: {exc}"
    return config, _cut_images(config, dataset)


def _cut_images(config: dict[str, Any], dataset: DatasetVersion) -> str | None:
    """Why a config's training cap would silently drop the images a dataset version adds, or None.

    Training keeps the first ``max_train_images`` images; a top-up or approved-data version puts
    the added images last, so a cap below its size trains the parent's images and nothing the
    ticket claims to add."""

    cap = config.get("max_train_images")
    added, count = appended_images(dataset.train)
    if cap is None or not added or cap >= count:
        return None
    return (
        f"max_train_images={cap} would cut {min(added, count - cap)} of the {added} images dataset version "
        f"{dataset.ref} adds (they come last, after its {count - added} base images); the ticket would "
        "train its parent's images under another name. Lift the cap, or build the version on the images "
        "the cap keeps"
    )


def _refuse(ticket: Ticket, run_id: str, audit: AuditSink, reason: str) -> TicketOutcome:
    outcome = TicketOutcome(ticket_id=ticket.id, run_id=run_id, status=TicketStatus.REFUSED, reason=reason)
    audit.append(Actor.RUNNER, "ticket_refused", {"ticket_id": ticket.id, "reason": reason}, run_id=run_id)
    log.info("ticket %s refused: %s", ticket.id, reason)
    return outcome


def _execute(run: _Run, config: dict[str, Any], scorer: Scorer, gate: GateSubmitter | None) -> TicketOutcome:
    _workspace.materialise(run.work, run.ticket, config)
    manifest = training_manifest(run.dataset.train, run.dataset.dev)
    _check_version(run.dataset, manifest)
    write_manifest(manifest, run.ticket_dir / "manifest.json")
    run.image_size = max(manifest.train.shape)
    run.data_bytes = sum(
        d.count * d.shape[0] * d.shape[1] * BYTES_PER_PIXEL for d in (manifest.train, manifest.dev)
    )
    config = _train(run, config)
    keep_host_config(run.ticket_dir, config)  # what a challenge re-derives from, never work/config.yaml
    model = copy_out(run.work, f"{OUT_DIR}/{MODEL_FILE}", run.ticket_dir / MODEL_FILE, cap=MAX_MODEL_BYTES)
    run.event("model_copied_out", {"sha256": model.sha256, "bytes": model.size})
    reported, truncated = _sandbox_report(run.work)
    metrics = _dev_metrics(model.path, run.dataset.dev, float(config["threshold"]), scorer)
    evidence = Evidence(
        model_sha256=model.sha256,
        model_bytes=model.size,
        manifest=manifest.summary(),
        manifest_file=str(run.ticket_dir / "manifest.json"),
        dev_metrics=metrics,
        threshold=float(config["threshold"]),
    )
    run.event("evidence_computed", evidence.model_dump(mode="json"))
    done = TicketOutcome(
        ticket_id=run.ticket.id,
        run_id=run.run_id,
        status=TicketStatus.DONE,
        attempts=run.attempts,
        device_seconds=round(run.device_seconds, 3),
        evidence=evidence,
        sandbox_reported=reported,
        sandbox_reported_truncated=truncated,
    )
    if gate is None:
        return done
    try:
        verdict = gate.submit(
            model.path,
            run.dataset.ref,
            run.ticket.id,
            replicate_of=run.ticket.replicate_of,
            run_id=run.run_id,
        )
    except Exception as exc:  # the evidence stands; only the submission failed
        failed = _failed(run, exc)
        return done.model_copy(
            update={
                "status": TicketStatus.FAILED,
                "traceback_ref": failed.traceback_ref,
                "reason": f"gate submission failed: {failed.reason}",
            }
        )
    return done.model_copy(update={"verdict": verdict})


def _check_version(dataset: DatasetVersion, manifest: TrainingManifest) -> None:
    for name, digest in (("train", manifest.train), ("dev", manifest.dev)):
        recorded = dataset.split_hashes.get(name)
        if recorded is not None and recorded != digest.content_hash:
            raise DataError(
                f"dataset version {dataset.ref}: the {name} split's content hash is "
                f"{digest.content_hash[:12]}..., version.json says {recorded[:12]}...; "
                "the version was modified after it was written"
            )


def _train(run: _Run, config: dict[str, Any]) -> dict[str, Any]:
    """Run the worker until it succeeds; after an OOM, again at half the batch. Returns the config used."""
    budget = run.ticket.budget.device_seconds
    for index in range(run.scheduler.settings.max_oom_retries + 1):
        left = budget - run.device_seconds
        if left <= 0:
            raise TicketFailed(f"device-second budget of {budget:g}s spent after {index} attempts")
        wall = None if run.deadline is None else run.deadline - time.monotonic()
        if wall is not None and wall < MIN_WALL_S:
            raise TicketFailed(
                f"not started: the run has {max(wall, 0.0):.0f} s of wall time left "
                f"(a ticket needs at least {MIN_WALL_S:g} s)"
            )
        result, estimate = _attempt(run, config, left, wall)
        run.device_seconds += result.duration_s
        oom = is_oom(result.exit_code, result.oom_killed, result.stderr_tail)
        attempt = Attempt(
            index=index,
            batch_size=int(config["batch_size"]),
            grad_accum=int(config["grad_accum"]),
            memory_estimate_bytes=estimate,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            oom=oom,
            duration_s=round(result.duration_s, 3),
        )
        run.attempts.append(attempt)
        run.event(
            "ticket_attempt",
            {**attempt.model_dump(mode="json"), "sandbox_events": result.events, **output_record(result)},
        )
        audit_sandbox_events(
            run.audit, result.events, ticket_id=run.ticket.id, run_id=run.run_id, attempt=index
        )
        if result.exit_code == 0 and not result.timed_out:
            return config
        if result.timed_out and wall is not None and wall < left + TIMEOUT_MARGIN_S:
            raise TicketFailed(
                f"killed at the run's wall: {wall:.0f} s of it were left when the worker started"
            )
        config = _next_config(config, result.timed_out, oom, result.exit_code, result.stderr_tail, budget)
    raise TicketFailed(
        f"out of memory after {len(run.attempts)} attempts "
        f"(MAX_OOM_RETRIES={run.scheduler.settings.max_oom_retries})"
    )


def _attempt(run: _Run, config: dict[str, Any], left: float, wall: float | None) -> tuple[Any, int | None]:
    estimate = run.scheduler.estimate(config, run.image_size, run.data_bytes)
    if run.attempts:  # a retry: the last attempt's output is set aside, the config rewritten safely
        _workspace.set_aside_output(run.work, len(run.attempts) - 1)
        _workspace.write_config(run.work, config)
    with run.scheduler.admit(estimate) as gpus:
        request = LaunchRequest(
            command=_workspace.worker_command(run.ticket),
            workspace=run.work,
            data={"train": run.dataset.train, "dev": run.dataset.dev},
            timeout_s=min(left + TIMEOUT_MARGIN_S, wall if wall is not None else math.inf),
            memory_bytes=run.scheduler.settings.memory_limit_bytes,
            gpus=gpus,
            cpus=run.scheduler.cpu_share(),
        )
        budget = run.ticket.budget.device_seconds
        with CurveWatcher(
            run.work,
            run.ticket.id,
            int(config["epochs"]),
            run.device_seconds,
            budget,
            run.progress,
            record=run.ticket_dir / PROGRESS_FILE,
        ):
            return run.launcher.launch(request), estimate


def _next_config(
    config: dict[str, Any], timed_out: bool, oom: bool, code: int, stderr: str, budget: float
) -> dict[str, Any]:
    if timed_out:
        raise TicketFailed(
            f"the worker ran past its budget of {budget:g} device-seconds "
            f"(+{TIMEOUT_MARGIN_S:g}s margin) and was killed"
        )
    if not oom:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "(no stderr)"
        raise TicketFailed(f"the worker exited with status {code}: {last[:500]}")
    smaller = shrink_for_oom(config)
    if smaller is None:
        raise TicketFailed("out of memory at batch size 1; the model does not fit the memory limit")
    return smaller


def _sandbox_report(work: Path) -> tuple[dict[str, Any] | None, bool]:
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


def _dev_metrics(model_path: Path, dev_dir: Path, threshold: float, scorer: Scorer) -> dict[str, float]:
    dev = read_split(dev_dir)
    prob = np.asarray(scorer(model_path, dev.images))  # (N, 1, H, W)
    if prob.shape != (len(dev), 1, *dev.images.shape[1:]):
        raise DataError(
            f"scorer returned shape {prob.shape} for {len(dev)} dev images of {dev.images.shape[1:]}"
        )
    return aggregate(per_image_metrics(prob[:, 0], dev.masks, threshold=threshold))


def _failed(run: _Run, exc: Exception) -> TicketOutcome:
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


def _write_outcome(ticket_dir: Path, outcome: TicketOutcome) -> None:
    if not ticket_dir.is_dir():
        return
    write_atomic(ticket_dir / "outcome.json", outcome.model_dump_json(indent=2) + "\n")
