"""Ticket execution: the runner, host-side evidence, and the scheduler.

Public API (see docs/runner.md)::

    from runner import TicketRunner, execute_ticket, TicketOutcome
    runner = TicketRunner(home, "bwrap", audit_log, run_id="r1", gate=client)
    outcome = runner.run(ticket, version, Path("configs/demo.yaml"))  # execute_ticket(ticket, home=..., ...)

``execute_ticket`` never raises for a bad ticket: it returns REFUSED (a policy check failed before
anything started), FAILED (reason and traceback blob recorded) or DONE (host-computed evidence).
"""

from runner._copyout import MAX_MODEL_BYTES, CopiedFile, UnsafeArtifact, copy_out, open_beneath, read_beneath
from runner._execute import (
    TIMEOUT_MARGIN_S,
    AuditSink,
    GateSubmitter,
    Scorer,
    TicketRunner,
    default_scorer,
    execute_ticket,
)
from runner._launch import HOST_CONFIG_FILE, LaunchRequest, LaunchResult, SandboxLauncher, WorkerLauncher
from runner._manifest import SplitDigest, TrainingManifest, training_manifest
from runner._policy import code_files, refusal_reason
from runner._progress import NOT_EVIDENCE, PROGRESS_FILE
from runner._ticket import BYTES_PER_PIXEL
from runner._workspace import TRAINING_PACKAGES, ticket_config
from runner.inputs import InitFrom, MemberModel
from runner.outcome import Attempt, Evidence, TicketOutcome, TicketStatus
from runner.scheduler import (
    AUTO_CONCURRENCY,
    MAX_AUTO_CONCURRENCY,
    Admission,
    ConcurrencyPlan,
    DeviceProfile,
    MemoryEstimator,
    Scheduler,
    SchedulerSettings,
    load_profile,
    profile_device,
    save_profile,
)
from segfactory.budgets import TicketCaps, ticket_caps

__all__ = [
    "AUTO_CONCURRENCY",
    "BYTES_PER_PIXEL",
    "HOST_CONFIG_FILE",
    "MAX_AUTO_CONCURRENCY",
    "TRAINING_PACKAGES",
    "MAX_MODEL_BYTES",
    "NOT_EVIDENCE",
    "PROGRESS_FILE",
    "TIMEOUT_MARGIN_S",
    "Admission",
    "Attempt",
    "AuditSink",
    "ConcurrencyPlan",
    "TicketCaps",
    "CopiedFile",
    "DeviceProfile",
    "Evidence",
    "GateSubmitter",
    "InitFrom",
    "LaunchRequest",
    "LaunchResult",
    "MemberModel",
    "MemoryEstimator",
    "SandboxLauncher",
    "Scheduler",
    "SchedulerSettings",
    "Scorer",
    "SplitDigest",
    "TicketOutcome",
    "TicketRunner",
    "code_files",
    "ticket_config",
    "TicketStatus",
    "TrainingManifest",
    "UnsafeArtifact",
    "WorkerLauncher",
    "copy_out",
    "default_scorer",
    "execute_ticket",
    "ticket_caps",
    "load_profile",
    "open_beneath",
    "profile_device",
    "read_beneath",
    "refusal_reason",
    "save_profile",
    "training_manifest",
]
