"""``segfactory run``: one factory run, from sandbox verify to the morning report.

``start_run(RunRequest(...))`` verifies the sandbox, starts the gate, checks and records the win
rule's hash, builds the graph (``agents.graph``) over ``HostServices`` with the SQLite
checkpointer in ``state.sqlite``, runs or resumes it, pulls the gate's events, anchors the audit
chain at the end and returns a summary. ``policies/run.yaml`` holds the per-profile defaults.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable

from agents._run_loop import RunSummary, execute, finished_summary
from agents.judge import default_judge
from agents.run_policy import DATASET, RunDefaults, load_run_defaults
from agents.run_setup import RunRequest
from audit import AuditLog
from audit.anchor import gate_anchor_store
from gate.client import GateClient
from gate.users import verified_before_drop
from gate.win_rule import load_win_rule
from runner import AUTO_CONCURRENCY, BYTES_PER_PIXEL, ConcurrencyPlan, Scheduler
from sandbox import get_backend
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.errors import PolicyError, SandboxError, UsageError
from segfactory.gpus import host_gpus
from segfactory.home import SOURCE_ROOT, Home
from segfactory.layout import RunLayout, RunRecord
from synthetic.splits import read_split
from synthetic.versions import resolve
from vision.config import load_config


def check_base_config(defaults: RunDefaults, *, has_gpu: bool | None = None) -> None:
    """Refuse, before anything starts, a base config that asks for CUDA on a machine without a GPU."""

    config = load_config(SOURCE_ROOT / defaults.base_config)
    if config.device != "cuda":
        return
    if has_gpu is None:
        has_gpu = bool(host_gpus())
    if not has_gpu:
        raise UsageError(
            f"{defaults.base_config} asks for device cuda and this machine has no NVIDIA GPU "
            "(no /proc/driver/nvidia/gpus); use a config with device auto or cpu"
        )


def run_caps(req: RunRequest, defaults: RunDefaults) -> RunCaps:
    """budgets.yaml's run caps, tightened by run.yaml, then by --budget/--wall (never loosened).
    A compare arm (``fill_budget``) has budgets.yaml's ``compare_arm`` caps, tightened only by its
    budget: run.yaml's defaults are a person's run, not an arm's."""

    budgets = load_budget_policy().for_profile(req.profile)
    cap = budgets.arm_caps() if req.fill_budget else budgets.run
    wanted = {
        **({} if req.fill_budget else defaults.run),
        **({"device_seconds": req.budget_s} if req.budget_s else {}),
        **({"wall_seconds": req.wall_s} if req.wall_s else {}),
    }
    values = cap.model_dump()
    for key, value in wanted.items():
        if value > values[key]:
            raise UsageError(
                f"{key} {value:g} is above the {req.profile} {'compare_arm' if req.fill_budget else 'run'} "
                f"cap {values[key]:g} in policies/budgets.yaml; ask for less or raise the cap there"
            )
        values[key] = type(values[key])(value)
    return RunCaps.model_validate(values)


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-%H%M%S", time.gmtime()) + f"-{secrets.token_hex(2)}"


def plan_concurrency(req: RunRequest, defaults: RunDefaults) -> tuple[int, ConcurrencyPlan | None]:
    """The tickets a run trains at once: the request's number, or for ``auto`` the scheduler's plan
    for one ticket of the base config on the run's dataset (its measured-memory estimate against
    the cores and the free memory, ``runner.Scheduler.auto_concurrency``)."""
    if req.concurrency != AUTO_CONCURRENCY:
        return int(req.concurrency), None
    config = load_config(SOURCE_ROOT / defaults.base_config).model_dump(mode="json")
    dataset = resolve(req.home.root, DATASET)
    shapes = [read_split(split, mmap=True).images.shape for split in (dataset.train, dataset.dev)]
    data_bytes = sum(n * h * w * BYTES_PER_PIXEL for n, h, w in shapes)
    scheduler = Scheduler.for_home(req.home)
    plan = scheduler.auto_concurrency(scheduler.estimate(config, max(shapes[0][1:]), data_bytes))
    req.progress(f"concurrency auto: {plan.tickets} tickets at once ({plan.basis})")
    return plan.tickets, plan


def _run_record(
    home: Home,
    req: RunRequest,
    run_id: str,
    caps: RunCaps,
    win_rule_sha: str,
    defaults: RunDefaults,
    concurrency: tuple[int, ConcurrencyPlan | None] | None = None,
) -> RunRecord:
    """Write runs/<id>/run.json at start; on resume read it and refuse a changed win rule."""
    layout = RunLayout(home, run_id)
    if req.resume:
        record = layout.read_record()
        if record.win_rule_sha256 != win_rule_sha:
            raise PolicyError(
                f"the win rule changed since run {run_id} started (recorded "
                f"{record.win_rule_sha256[:12]}…, now {win_rule_sha[:12]}…); start a new run"
            )
        return record
    used, plan = concurrency if concurrency is not None else plan_concurrency(req, defaults)
    record = RunRecord(
        run_id=run_id,
        profile=req.profile,
        proposer=req.proposer,
        backend=req.backend,
        caps=caps,
        win_rule_sha256=win_rule_sha,
        started_at=time.time(),
        judge=req.judge or default_judge(req.proposer),
        code_agent=req.code_agent,
        fill_budget=req.fill_budget,
        user=running_user(),
        base_config=defaults.base_config,
        sized_note=defaults.sized_note,
        concurrency=used,
        concurrency_requested=req.concurrency,
        concurrency_plan=plan,
        seed=req.seed,
    )
    layout.write_record(record)
    return record


def running_user() -> str:
    """Who the orchestrator runs as (``segfactory`` after a drop from root), for ``run.json``."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def verify_sandbox(backend: str, home: Home, progress: Callable[[str], None]) -> None:
    if verified_before_drop(backend):  # root verified it before dropping (its canary goes into the vault)
        progress(f"sandbox verify ({backend}): ok, as root before continuing as this user")
        return

    try:
        sandbox = get_backend(backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sandbox.check_available()
    report = sandbox.verify(home.root)
    failed = [c.name for c in report.checks if not c.ok]
    if not report.ok:
        raise SandboxError(
            f"sandbox verify ({backend}) failed: {', '.join(failed)}; "
            f"see `segfactory sandbox verify --backend {backend}`"
        )
    progress(f"sandbox verify ({backend}): ok, {len(report.checks)} checks in {report.duration_s:.1f} s")


def check_win_rule(client: GateClient) -> str:
    """The win rule's hash, once the gate confirms it still pins this exact rule; else PolicyError."""

    status = client.status()
    _, digest = load_win_rule()
    if not status.win_rule_ok or status.win_rule_sha256 != digest:
        raise PolicyError(
            "the gate's pinned win rule does not match policies/win_rule.yaml; queries are "
            "stopped until a person re-pins it"
        )
    return digest


def start_run(req: RunRequest) -> RunSummary:
    """Run (or resume) one factory run; returns the summary the CLI prints."""

    home = req.home
    if req.resume and RunLayout(home, req.resume).read_record().finished_at:
        req.progress(f"run {req.resume} already finished; nothing to do")
        return finished_summary(home, req.resume)
    defaults = load_run_defaults(req.profile)
    if req.resume:  # a resumed run keeps the config it started with, whatever this machine has now
        started = RunLayout(home, req.resume).read_record().base_config
        if started and started != defaults.base_config:
            defaults = defaults.model_copy(update={"base_config": started, "sized_note": ""})
    check_base_config(defaults)
    if defaults.sized_note and not req.resume:
        req.progress(defaults.sized_note)
    caps = run_caps(req, defaults)
    verify_sandbox(req.backend, home, req.progress)
    concurrency = None if req.resume else plan_concurrency(req, defaults)  # a resume keeps its own
    with gate_anchor_store(home) as anchor, AuditLog(home, anchor) as audit:  # a served gate, or one started
        client = anchor.client
        run_id = req.resume or new_run_id()
        record = _run_record(home, req, run_id, caps, check_win_rule(client), defaults, concurrency)
        summary = execute(req, record, client, audit, defaults)
        audit.close_run(run_id)  # anchors the chain head: no unanchored window after a run
    RunLayout(home, run_id).write_record(record.model_copy(update={"finished_at": time.time()}))
    return summary


__all__ = [
    "RunRequest",
    "check_base_config",
    "new_run_id",
    "plan_concurrency",
    "run_caps",
    "start_run",
]
