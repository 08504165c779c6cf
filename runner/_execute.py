"""Executing one ticket: refuse or materialise, train in the sandbox, copy out, compute evidence.

Order: policy checks before anything starts (REFUSED), and with ``init_from`` the parent's
checkpoint staged and hash-checked (``_staging``; REFUSED too);
the workspace ``runs/<run>/tickets/<id>/work/`` with ``config.yaml`` (and, for code tickets, a
copy of the training code); the training manifest from the dataset version the host mounts;
the worker in the sandbox, admitted by the scheduler and killed past its device-second budget,
retried at half the batch after an OOM (the staged checkpoint hashed again before each start);
``model.onnx`` and ``model.safetensors`` copied out beneath the workspace; dev
metrics from the copied model through the confined scorer; then, when a gate is given, the
submission. Any error after the start is caught here and recorded as FAILED.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner import _staging, _workspace
from runner._evidence import (
    GateSubmitter,
    Scorer,
    default_scorer,
)
from runner._launch import (
    LaunchRequest,
    LaunchResult,
    WorkerLauncher,
    audit_sandbox_events,
    keep_host_config,
    output_record,
)
from runner._package import package_ticket
from runner._policy import refusal_reason
from runner._progress import CURVE_PATH, PROGRESS_FILE, CurveWatcher
from runner._ticket import (
    StagedInputs,
    TicketFailed,
    TicketRun,
    finish,
    launcher_for,
    prepare,
    profile_of,
    refuse,
    run_recorded,
)
from runner.inputs import InitFrom, MemberModel
from runner.outcome import Attempt, TicketOutcome
from runner.scheduler import Scheduler, is_oom, shrink_for_oom
from segfactory.budgets import TicketCaps, ticket_caps
from segfactory.home import Home
from segfactory.records import Ticket
from segfactory.seams import AuditSink
from synthetic.splits import appended_images
from synthetic.versions import DatasetVersion
from vision.config import TrainConfig

TIMEOUT_MARGIN_S = 30.0  # added to the remaining device-second budget per attempt (start-up, export)
MIN_WALL_S = 30.0  # a ticket is not started with less of the run's wall time left than this
# A ticket's workspace shares the home's filesystem with the audit log, the run state and the
# vault: it does not start while less than this is free there, in bytes or in inodes, so the
# records every result rests on keep room to be written whatever the tickets before it left.
FREE_BYTES_RESERVE = 2 * 1024**3
FREE_INODES_RESERVE = 100_000

log = logging.getLogger(__name__)

__all__ = ["GateSubmitter", "Scorer", "TicketRunner", "default_scorer", "execute_ticket"]


def execute_ticket(
    ticket: Ticket,
    *,
    home: Home,
    dataset_version: DatasetVersion,
    backend: WorkerLauncher | str,
    base_config: Mapping[str, object] | Path,
    audit: AuditSink,
    gate: GateSubmitter | None = None,
    run_id: str = "adhoc",
    scheduler: Scheduler | None = None,
    scorer: Scorer = default_scorer,
    budget_policy: TicketCaps | None = None,
    progress: Callable[[str], None] | None = None,
    wall_left_s: float | None = None,
    init_from: InitFrom | None = None,
) -> TicketOutcome:
    """Run ``ticket`` end to end and return its recorded outcome; never raises for a bad ticket.

    ``wall_left_s``: what is left of the run's wall time; the worker gets no more than that, and a
    ticket is not started with less than ``MIN_WALL_S``. ``progress`` receives a line per epoch
    the worker reports while it trains (the sandbox's claim, for people). ``init_from``: the
    host-planned weights to start from (a DONE ticket's checkpoint in this home); it is copied
    into the ticket folder, hash-checked, and mounted read-only at ``/init``, and training starts
    from it with a fresh optimiser and schedule. A bad one is REFUSED with its reason."""
    started = time.monotonic()
    policy = budget_policy or ticket_caps(profile_of(home))
    config, reason = _checked_config(ticket, dataset_version, base_config, policy)
    if reason is None:
        reason = disk_reserve_problem(home.root)
    ticket_dir = home.tickets_dir(run_id) / ticket.id
    if reason is None and ticket_dir.exists():
        reason = f"ticket {ticket.id} already has a folder in run {run_id}; ticket ids are unique per run"
    inputs = None
    if reason is None and config is not None and init_from is not None:
        inputs, reason = _stage_init(home, run_id, init_from, config)
    if reason is not None or config is None:
        return refuse(ticket, run_id, audit, reason or "invalid config")
    run = TicketRun(
        ticket,
        run_id,
        dataset_version,
        launcher_for(backend),
        audit,
        scheduler or Scheduler.for_home(home),
        ticket_dir,
        deadline=None if wall_left_s is None else started + wall_left_s,
        progress=progress,
        inputs=inputs,
    )
    share = run.scheduler.cpu_share()
    if share is not None:  # several tickets at once on the CPU: this one trains on its share of the cores
        config = config.model_copy(update={"threads": min(config.threads or share, share)})
    extra = {}
    if init_from is not None and inputs is not None:
        extra = {"init_from": init_from.model_dump(mode="json"), "staged": inputs.record()}
    return run_recorded(
        run,
        started,
        {"config": config.model_dump(mode="json"), **extra},
        lambda: _execute(run, config, scorer, gate),
        {"init_from": init_from},
    )


def _stage_init(
    home: Home, run_id: str, init_from: InitFrom, config: TrainConfig
) -> tuple[StagedInputs | None, str | None]:
    """(the staged checkpoint, None), or (None, why the ticket is refused)."""
    t0 = time.perf_counter()
    try:
        folder = _staging.stage_init(home, run_id, init_from, config)
    except _staging.StagingRefused as exc:
        return None, str(exc)
    hashes = {init_from.file: init_from.sha256}
    staged_s = time.perf_counter() - t0
    return StagedInputs(folder, _staging.INIT_DIR, _staging.INIT_MOUNT, hashes, staged_s=staged_s), None


@dataclass(frozen=True)
class TicketRunner:
    """The runner's collaborators, held once; ``run`` executes one ticket with them.

    The loop's services, the controls, the challenge and the labelling finetune each hold one
    instead of repeating ``execute_ticket``'s keywords at every call. ``scorer`` None is the
    gate's confined scorer; ``budget_policy`` None is the home profile's ticket caps. ``package``
    runs a packaging ticket with the same collaborators.
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
        base_config: Mapping[str, object] | Path,
        *,
        wall_left_s: float | None = None,
        init_from: InitFrom | None = None,
    ) -> TicketOutcome:
        """``execute_ticket`` with these collaborators; ``init_from`` continues a parent's weights."""
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
            init_from=init_from,
        )

    def package(
        self,
        ticket: Ticket,
        dataset_version: DatasetVersion,
        members: Sequence[MemberModel],
        *,
        wall_left_s: float | None = None,
    ) -> TicketOutcome:
        """A packaging ticket (kind ``package``) over ``members`` (``TicketOutcome.member()`` of DONE
        tickets of this home): one ONNX model, scored and optionally submitted like any other."""
        return package_ticket(
            ticket,
            home=self.home,
            dataset_version=dataset_version,
            members=members,
            backend=self.backend,
            audit=self.audit,
            gate=self.gate,
            run_id=self.run_id,
            scheduler=self.scheduler,
            scorer=self.scorer or default_scorer,
            budget_policy=self.budget_policy,
            wall_left_s=wall_left_s,
        )


def _checked_config(
    ticket: Ticket, dataset: DatasetVersion, base: Mapping[str, object] | Path, policy: TicketCaps
) -> tuple[TrainConfig | None, str | None]:
    """(validated config, None), or (None, why the ticket is refused)."""
    reason = refusal_reason(ticket, policy)
    if reason is None and not dataset.approved:
        reason = f"dataset version {dataset.ref} is not approved; approve it before training on it"
    if reason is not None:
        return None, reason
    try:
        config = _workspace.validated_config(base, ticket)
    except Exception as exc:  # UsageError from the config model, or a malformed base config
        return None, f"the ticket's config change is invalid: {exc}"
    return config, _cut_images(config, dataset)


def _cut_images(config: TrainConfig, dataset: DatasetVersion) -> str | None:
    """Why a config's training cap would silently drop the images a dataset version adds, or None.

    Training keeps the first ``max_train_images`` images; a top-up or approved-data version puts
    the added images last, so a cap below its size trains the parent's images and nothing the
    ticket claims to add."""

    cap = config.max_train_images
    added, count = appended_images(dataset.train)
    if cap is None or not added or cap >= count:
        return None
    return (
        f"max_train_images={cap} would cut {min(added, count - cap)} of the {added} images dataset version "
        f"{dataset.ref} adds (they come last, after its {count - added} base images); the ticket would "
        "train its parent's images under another name. Lift the cap, or build the version on the images "
        "the cap keeps"
    )


def disk_reserve_problem(path: Path) -> str | None:
    """Why no ticket may start on ``path``'s filesystem (below a free-space reserve), or None."""
    fs = os.statvfs(path)
    free = fs.f_bavail * fs.f_frsize
    if free < FREE_BYTES_RESERVE:
        return (
            f"only {free / 1024**3:.2f} GiB is free on the home's filesystem, below the reserve of "
            f"{FREE_BYTES_RESERVE / 1024**3:.2f} GiB kept for the audit log, the run state and the vault"
        )
    if fs.f_files and fs.f_favail < FREE_INODES_RESERVE:  # f_files 0: no inode limit (btrfs)
        return (
            f"only {fs.f_favail} inodes are free on the home's filesystem, below the reserve of "
            f"{FREE_INODES_RESERVE} kept for the audit log, the run state and the vault"
        )
    return None


def _execute(
    run: TicketRun, config: TrainConfig, scorer: Scorer, gate: GateSubmitter | None
) -> TicketOutcome:
    data = config.model_dump(mode="json")
    manifest = prepare(run, lambda: _workspace.materialise(run.work, run.ticket, data))
    config = _train(run, config)
    used = config.model_dump(mode="json")
    keep_host_config(run.ticket_dir, used)  # what a challenge re-derives from, never work/config.yaml
    return finish(run, manifest, config.threshold, scorer, gate, checkpoint=True)


def _train(run: TicketRun, config: TrainConfig) -> TrainConfig:
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
            batch_size=config.batch_size,
            grad_accum=config.grad_accum,
            memory_estimate_bytes=estimate,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            oom=oom,
            duration_s=round(result.duration_s, 3),
        )
        run.attempts.append(attempt)
        run.event(
            "ticket_attempt",
            {
                **attempt.model_dump(mode="json"),
                "sandbox_events": result.events,
                **output_record(result),
                **({"staged": run.inputs.record()} if run.inputs is not None else {}),
            },
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


def _attempt(
    run: TicketRun, config: TrainConfig, left: float, wall: float | None
) -> tuple[LaunchResult, int | None]:
    estimate = run.scheduler.estimate(config.model_dump(mode="json"), run.image_size, run.data_bytes)
    if run.attempts:  # a retry: the last attempt's output is set aside, the config rewritten safely
        _workspace.set_aside_output(run.work, len(run.attempts) - 1)
        _workspace.write_config(run.work, config.model_dump(mode="json"))
    with run.scheduler.admit(estimate) as gpus:
        request = LaunchRequest(
            command=_workspace.worker_command(run.ticket, init_from=run.inputs is not None),
            workspace=run.work,
            data={"train": run.dataset.train, "dev": run.dataset.dev},
            extra_ro={run.inputs.mount: run.inputs.folder} if run.inputs is not None else {},
            timeout_s=min(left + TIMEOUT_MARGIN_S, wall if wall is not None else math.inf),
            memory_bytes=run.scheduler.settings.memory_limit_bytes,
            gpus=gpus,
            cpus=run.scheduler.cpu_share(),
            live=[CURVE_PATH],
        )
        budget = run.ticket.budget.device_seconds
        with CurveWatcher(
            run.work,
            run.ticket.id,
            config.epochs,
            run.device_seconds,
            budget,
            run.progress,
            record=run.ticket_dir / PROGRESS_FILE,
        ):
            if run.inputs is not None:  # at mount time: a staged file rewritten since staging is caught here
                run.inputs.verify()
            return run.launcher.launch(request), estimate


def _next_config(
    config: TrainConfig, timed_out: bool, oom: bool, code: int, stderr: str, budget: float
) -> TrainConfig:
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
