"""A packaging ticket: trains nothing; packages DONE tickets' models into one, in the sandbox.

Order: the policy checks (kind ``package``, budget, an approved dataset version, a change that
is a valid ``vision.packaging.PackageSpec`` naming none of its host-owned keys); the members,
each a DONE ticket's copied-out ``model.onnx`` of this home, staged into the ticket folder and
hash-checked (``_staging``; every failure REFUSED, nothing started); the spec's host-owned keys
set by the host (the win rule's threshold, and the carve the members trained with, read from
their host-kept configs); then ``python -m vision.packaging`` in the sandbox with the members
read-only at ``/members`` and only the train split mounted (the choice never sees dev); then the
same copy-out, evidence (at the win rule's threshold, which the package folds its own into) and
optional submission as any ticket.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from pydantic import ValidationError

from gate.win_rule import load_win_rule
from runner import _staging, _workspace
from runner._evidence import GateSubmitter, Scorer, default_scorer
from runner._launch import LaunchRequest, WorkerLauncher, audit_sandbox_events, output_record
from runner._policy import PACKAGE_KINDS, refusal_reason
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
from runner.inputs import MemberModel
from runner.outcome import Attempt, TicketOutcome
from runner.scheduler import Scheduler
from segfactory.budgets import TicketCaps, ticket_caps
from segfactory.home import Home
from segfactory.records import Ticket
from segfactory.seams import AuditSink
from synthetic.splits import read_split
from synthetic.versions import DatasetVersion
from vision.holdout import CARVE_FRACTION, CARVE_SEED, held_out
from vision.packaging import HOST_KEYS, MIN_CHOICE_IMAGES, PackageSpec

TIMEOUT_MARGIN_S = 30.0  # added to the device-second budget (start-up)
PACKAGE_BASE_BYTES = 1024**3  # memory estimate: interpreter, onnx and onnxruntime
MODEL_MEMORY_FACTOR = 8  # memory estimate per member byte: parsed copies and activations of the views
# the factory's carve, for members that carved nothing (trained before the runner set one, or on
# every image): the threshold is then chosen on images they trained on, as it was for them
DEFAULT_HOLDOUT = {"fraction": CARVE_FRACTION, "seed": CARVE_SEED}


def package_ticket(
    ticket: Ticket,
    *,
    home: Home,
    dataset_version: DatasetVersion,
    members: Sequence[MemberModel],
    backend: WorkerLauncher | str,
    audit: AuditSink,
    gate: GateSubmitter | None = None,
    run_id: str = "adhoc",
    scheduler: Scheduler | None = None,
    scorer: Scorer = default_scorer,
    budget_policy: TicketCaps | None = None,
    wall_left_s: float | None = None,
) -> TicketOutcome:
    """Package ``members`` per ``ticket.change`` (a ``PackageSpec`` without its host keys) and
    return the recorded outcome; never raises for a bad ticket (REFUSED or FAILED instead)."""
    started = time.monotonic()
    policy = budget_policy or ticket_caps(profile_of(home))
    ticket_dir = home.tickets_dir(run_id) / ticket.id
    reason = _policy_reason(ticket, dataset_version, policy)
    if reason is None and ticket_dir.exists():
        reason = f"ticket {ticket.id} already has a folder in run {run_id}; ticket ids are unique per run"
    inputs = spec = None
    if reason is None:
        inputs, reason = _stage(home, run_id, members)
    if reason is None:
        spec, reason = _spec(ticket, home, members, dataset_version)
    if reason is not None or spec is None or inputs is None:
        _staging.discard(inputs.folder if inputs is not None else None)
        return refuse(ticket, run_id, audit, reason or "invalid package spec")
    run = TicketRun(
        ticket,
        run_id,
        dataset_version,
        launcher_for(backend),
        audit,
        scheduler or Scheduler.for_home(home),
        ticket_dir,
        deadline=None if wall_left_s is None else started + wall_left_s,
        inputs=inputs,
    )
    payload = {
        "package": spec.model_dump(mode="json"),
        "members": [m.model_dump(mode="json") for m in members],
    }
    return run_recorded(
        run, started, payload, lambda: _package(run, spec, scorer, gate), {"members": list(members)}
    )


def _policy_reason(ticket: Ticket, dataset: DatasetVersion, policy: TicketCaps) -> str | None:
    reason = refusal_reason(ticket, policy, runnable=PACKAGE_KINDS)
    if reason is None and not dataset.approved:
        reason = f"dataset version {dataset.ref} is not approved; approve it before packaging on it"
    owned = sorted(set(ticket.change) & set(HOST_KEYS))
    if reason is None and owned:
        reason = (
            f"the ticket's change names {owned}, which the host sets (the win rule's threshold, the carve)"
        )
    return reason


def _spec(
    ticket: Ticket, home: Home, members: Sequence[MemberModel], dataset: DatasetVersion
) -> tuple[PackageSpec | None, str | None]:
    """The ticket's spec with the host-owned keys set by the host, or why it is refused."""
    try:
        holdout = _members_holdout(home, members)
        spec = PackageSpec.model_validate(
            {
                **ticket.change,
                "gate_threshold": load_win_rule()[0].threshold,
                "holdout_fraction": holdout["fraction"],
                "holdout_seed": holdout["seed"],
            }
        )
    except _staging.StagingRefused as exc:
        return None, str(exc)
    except ValidationError as exc:
        return (
            None,
            f"the ticket's package change is invalid: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}",
        )
    return spec, _carve_reason(dataset, spec)


def _carve_reason(dataset: DatasetVersion, spec: PackageSpec) -> str | None:
    """Why the train split's carve is too small to choose on (the sandbox would refuse too), or None."""
    rows = read_split(dataset.train, mmap=True).image_meta
    carved = len(held_out([str(r["sha256"]) for r in rows], spec.holdout_fraction, spec.holdout_seed))
    if carved >= MIN_CHOICE_IMAGES:
        return None
    return (
        f"the carve of {dataset.ref}'s train split (fraction {spec.holdout_fraction:g}, seed "
        f"{spec.holdout_seed}) holds {carved} images; choosing a threshold needs {MIN_CHOICE_IMAGES}"
    )


def _members_holdout(home: Home, members: Sequence[MemberModel]) -> dict[str, object]:
    """The carve every member trained without (``validation`` of their host-kept configs): the
    images the choice is made on. Members that carved differently cannot be packaged together."""
    carves = []
    for member in members:
        validation = _staging.parent_config(home, member).get("validation") or {}
        if not validation.get("fraction"):  # carved nothing
            validation = DEFAULT_HOLDOUT
        carves.append({"fraction": validation.get("fraction"), "seed": validation.get("seed")})
    if any(c != carves[0] for c in carves):
        raise _staging.StagingRefused(
            f"members held out different training images ({carves}); only members trained with one "
            "carve can choose a threshold on images none of them trained on"
        )
    return carves[0] if carves else dict(DEFAULT_HOLDOUT)


def _stage(home: Home, run_id: str, members: Sequence[MemberModel]) -> tuple[StagedInputs | None, str | None]:
    t0 = time.perf_counter()
    try:
        folder = _staging.stage_members(home, run_id, members)
    except _staging.StagingRefused as exc:
        return None, str(exc)
    hashes = {_staging.member_name(i): m.sha256 for i, m in enumerate(members)}
    staged_s = time.perf_counter() - t0
    return StagedInputs(folder, _staging.MEMBERS_DIR, _staging.MEMBERS_MOUNT, hashes, staged_s=staged_s), None


def _package(run: TicketRun, spec: PackageSpec, scorer: Scorer, gate: GateSubmitter | None) -> TicketOutcome:
    manifest = prepare(run, lambda: _workspace.materialise_package(run.work, spec))
    _attempt(run)
    return finish(run, manifest, spec.gate_threshold, scorer, gate, checkpoint=False)


def _estimate(run: TicketRun) -> int:
    staged = sum((run.inputs.folder / name).stat().st_size for name in run.inputs.hashes) if run.inputs else 0
    return PACKAGE_BASE_BYTES + MODEL_MEMORY_FACTOR * staged + run.data_bytes


def _attempt(run: TicketRun) -> None:
    """One sandbox run of the packaging step; a non-zero exit fails the ticket with its last line."""
    budget = run.ticket.budget.device_seconds
    wall = None if run.deadline is None else run.deadline - time.monotonic()
    assert run.inputs is not None  # staged before the run was made
    with run.scheduler.admit(_estimate(run)) as gpus:
        request = LaunchRequest(
            command=_workspace.package_command(),
            workspace=run.work,
            data={"train": run.dataset.train},
            extra_ro={run.inputs.mount: run.inputs.folder},
            timeout_s=min(budget + TIMEOUT_MARGIN_S, wall if wall is not None else math.inf),
            memory_bytes=run.scheduler.settings.memory_limit_bytes,
            gpus=gpus,
            cpus=run.scheduler.cpu_share(),
        )
        run.inputs.verify()  # at mount time: a member rewritten since staging is caught here
        result = run.launcher.launch(request)
    run.device_seconds += result.duration_s
    attempt = Attempt(
        index=0, batch_size=1, grad_accum=1, exit_code=result.exit_code, timed_out=result.timed_out,
        oom=result.oom_killed, duration_s=round(result.duration_s, 3),
    )  # fmt: skip
    run.attempts.append(attempt)
    run.event(
        "ticket_attempt",
        {
            **attempt.model_dump(mode="json"),
            "sandbox_events": result.events,
            **output_record(result),
            "staged": run.inputs.record(),
        },
    )
    audit_sandbox_events(run.audit, result.events, ticket_id=run.ticket.id, run_id=run.run_id, attempt=0)
    if result.timed_out:
        raise TicketFailed(
            f"the packaging step ran past its budget of {budget:g} device-seconds and was killed"
        )
    if result.exit_code != 0:
        last = result.stderr_tail.strip().splitlines()[-1] if result.stderr_tail.strip() else "(no stderr)"
        raise TicketFailed(f"the packaging step exited with status {result.exit_code}: {last[:500]}")
