"""``segfactory run``: one factory run, from sandbox verify to the morning report.

``start_run(RunRequest(...))`` verifies the sandbox, starts the gate, checks and records the win
rule's hash, builds the graph (``agents.graph``) over ``HostServices`` with the SQLite
checkpointer in ``state.sqlite``, runs or resumes it, pulls the gate's events, anchors the audit
chain at the end and returns a summary. ``policies/run.yaml`` holds the per-profile defaults.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents._run_loop import RunSummary, execute, finished_summary
from agents.actions import load_yaml_policy
from agents.judge import default_judge
from audit import AuditLog
from audit.anchor import gate_anchor_store
from gate.users import verified_before_drop
from gate.win_rule import load_win_rule
from sandbox import get_backend
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.errors import PolicyError, SandboxError, UsageError
from segfactory.gpus import host_gpus
from segfactory.home import SOURCE_ROOT, Home
from segfactory.records import Budget
from vision.config import load_config

RUN_POLICY = SOURCE_ROOT / "policies" / "run.yaml"
RUN_FILE = "run.json"  # runs/<id>/run.json: what the run was started with (resume reads it)
DATASET = "synthetic/v1"  # the dataset version a run trains on (init creates it)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Plateau(_Strict):
    """The written rule that ends a run that has stopped improving."""

    tickets_without_dev_win: int = Field(default=0, ge=0)  # 0: never (the budget ends the run)


class CpuSizing(_Strict):
    """What replaces a GPU-sized profile's config and ticket budget on a machine without a GPU."""

    base_config: str
    ticket: Budget
    run: dict[str, float] = Field(default_factory=dict)  # replaces the profile's run defaults key by key


class RunDefaults(_Strict):
    base_config: str
    ticket: Budget
    run: dict[str, float] = Field(default_factory=dict)  # tickets, device_seconds, wall_seconds
    plateau: Plateau = Plateau()
    explore: bool = True  # fill the batch with TPE around the incumbent when the analysis has nothing new
    default_action: bool = True  # each round on a trained best starts with a fresh-seed re-run (a control)
    cpu: CpuSizing | None = None  # the profile is sized for a GPU; this is its CPU-sized variant
    # Set by ``load_run_defaults``, never in run.yaml: why the CPU-sized variant replaced the profile's
    # own config ("" when it did not). The run says it at start and the report names the config.
    sized_note: str = ""


class RunPolicy(_Strict):
    schema_version: Literal[1]
    profiles: dict[str, RunDefaults]


def load_run_defaults(profile: str, path: Path = RUN_POLICY, *, has_gpu: bool | None = None) -> RunDefaults:
    """One profile of ``policies/run.yaml`` for this machine; a file that does not parse names the
    file and line. A profile sized for a GPU (one with a ``cpu`` variant) gets that variant's config
    and ticket budget where the machine has no NVIDIA GPU (``has_gpu``; None: ask the driver)."""

    policy: RunPolicy = load_yaml_policy(path, RunPolicy)
    if profile not in policy.profiles:
        raise UsageError(f"{path} has no profile {profile!r}; known: {', '.join(policy.profiles)}")
    defaults = policy.profiles[profile]
    if defaults.cpu is None:
        return defaults
    if has_gpu is None:
        has_gpu = bool(host_gpus())
    if has_gpu:
        return defaults
    cpu = defaults.cpu
    note = (
        f"no NVIDIA GPU on this machine: profile {profile!r} uses its CPU-sized config {cpu.base_config} "
        f"({cpu.ticket.device_seconds:g} device-s, {cpu.ticket.epochs} epochs a ticket) instead of "
        f"{defaults.base_config}, which is sized for one GPU"
    )
    return defaults.model_copy(
        update={
            "base_config": cpu.base_config,
            "ticket": cpu.ticket,
            "run": {**defaults.run, **cpu.run},
            "cpu": None,
            "sized_note": note,
        }
    )


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


@dataclass(frozen=True)
class RunRequest:
    home: Home
    profile: str
    proposer: str = "rules"
    backend: str = "bwrap"
    budget_s: float | None = None  # device seconds (--budget)
    wall_s: float | None = None  # --wall
    resume: str | None = None
    progress: Callable[[str], None] = lambda line: None
    judge: str | None = None  # rules | llm:<provider spec>; None: agents.judge.default_judge(proposer)
    code_agent: bool = False  # code drafts get their files from the code-editing agent (agents.code_arm)
    # Stop only on the budget (device, wall, tickets) and start a ticket while any device time is
    # left, as a sweep does: no plateau rule, no half-ticket rule. ``compare`` sets it so that every
    # arm stops by the same rule and spends its budget.
    fill_budget: bool = False
    concurrency: int = 1  # tickets trained at once under the run's one scheduler (--concurrency)


def run_caps(req: RunRequest, defaults: RunDefaults) -> Any:
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


def _read_record(home: Home, run_id: str) -> dict[str, Any]:
    path = home.runs / run_id / RUN_FILE
    if not path.is_file():
        raise UsageError(f"no run {run_id!r} in {home.runs}; see the run ids there")
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def _run_record(
    home: Home, req: RunRequest, run_id: str, caps: Any, win_rule_sha: str, defaults: RunDefaults
) -> dict[str, Any]:
    """Write runs/<id>/run.json at start; on resume read it and refuse a changed win rule."""
    path = home.runs / run_id / RUN_FILE
    if req.resume:
        record = _read_record(home, run_id)
        if record["win_rule_sha256"] != win_rule_sha:
            raise PolicyError(
                f"the win rule changed since run {run_id} started (recorded "
                f"{record['win_rule_sha256'][:12]}…, now {win_rule_sha[:12]}…); start a new run"
            )
        return record

    record = {
        "run_id": run_id,
        "profile": req.profile,
        "proposer": req.proposer,
        "backend": req.backend,
        "caps": caps.model_dump(),
        "win_rule_sha256": win_rule_sha,
        "started_at": time.time(),
        "judge": req.judge or default_judge(req.proposer),
        "code_agent": req.code_agent,
        "fill_budget": req.fill_budget,
        "user": running_user(),
        "base_config": defaults.base_config,
        "sized_note": defaults.sized_note,
        "concurrency": req.concurrency,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True))
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


def check_win_rule(client: Any) -> str:
    """The win rule's hash, once the gate confirms it still pins this exact rule; else PolicyError."""

    status = client.status()
    _, digest = load_win_rule()
    if not status.get("win_rule_ok") or status.get("win_rule_sha256") != digest:
        raise PolicyError(
            "the gate's pinned win rule does not match policies/win_rule.yaml; queries are "
            "stopped until a person re-pins it"
        )
    return digest


def start_run(req: RunRequest) -> RunSummary:
    """Run (or resume) one factory run; returns the summary the CLI prints."""

    home = req.home
    if req.resume and _read_record(home, req.resume).get("finished_at"):
        req.progress(f"run {req.resume} already finished; nothing to do")
        return finished_summary(home, req.resume)
    defaults = load_run_defaults(req.profile)
    if req.resume:  # a resumed run keeps the config it started with, whatever this machine has now
        started = _read_record(home, req.resume).get("base_config")
        if started and started != defaults.base_config:
            defaults = defaults.model_copy(update={"base_config": started, "sized_note": ""})
    check_base_config(defaults)
    if defaults.sized_note and not req.resume:
        req.progress(defaults.sized_note)
    caps = run_caps(req, defaults)
    verify_sandbox(req.backend, home, req.progress)
    with gate_anchor_store(home) as anchor, AuditLog(home, anchor) as audit:  # a served gate, or one started
        client = anchor.client
        run_id = req.resume or new_run_id()
        record = _run_record(home, req, run_id, caps, check_win_rule(client), defaults)
        summary = execute(req, record, client, audit, defaults)
        audit.close_run(run_id)  # anchors the chain head: no unanchored window after a run
    record["finished_at"] = time.time()
    (home.runs / run_id / RUN_FILE).write_text(json.dumps(record, indent=2, sort_keys=True))
    return summary


__all__ = [
    "RUN_FILE",
    "RunRequest",
    "check_base_config",
    "load_run_defaults",
    "new_run_id",
    "run_caps",
    "start_run",
]
