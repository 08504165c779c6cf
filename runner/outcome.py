"""What a ticket ended as: the records the runner returns, writes and audits."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from segfactory.records import CoarseVerdict
from segfactory.text import inert


class TicketStatus(StrEnum):
    DONE = "DONE"  # trained, copied out, evidence computed (and submitted, when a gate was given)
    FAILED = "FAILED"  # started and did not finish: reason and traceback reference recorded
    REFUSED = "REFUSED"  # never started: a policy check failed (nothing ran, nothing was spent)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1


class Attempt(_Record):
    """One sandbox run of the worker. After an OOM the next attempt halves the batch."""

    index: int = Field(ge=0)
    batch_size: int = Field(gt=0)
    grad_accum: int = Field(gt=0)
    memory_estimate_bytes: int | None = None
    exit_code: int
    timed_out: bool
    oom: bool  # the kernel's OOM kill, exit 137, or an allocator error in stderr
    duration_s: float = Field(ge=0)


class Evidence(_Record):
    """Computed on the host only: from the dataset version it mounted and the copied-out model."""

    model_sha256: str
    model_bytes: int = Field(gt=0)
    manifest: dict[str, Any]  # TrainingManifest.summary(): split paths, counts, content hashes
    manifest_file: str  # the full manifest (every training image hash), in the ticket folder
    dev_metrics: dict[str, float]  # vision.metrics.aggregate over the dev split, confined scorer
    threshold: float


class TicketOutcome(_Record):
    """The whole record of one ticket. ``sandbox_reported`` is the worker's own claim: not evidence."""

    ticket_id: str
    run_id: str
    status: TicketStatus
    reason: str | None = None
    traceback_ref: str | None = None  # blob:<sha256> in the audit blob store
    attempts: list[Attempt] = Field(default_factory=list)
    device_seconds: float = Field(default=0.0, ge=0)
    wall_seconds: float = Field(default=0.0, ge=0)
    evidence: Evidence | None = None
    sandbox_reported: dict[str, Any] | None = None  # result.json as the worker wrote it, untrusted
    sandbox_reported_truncated: bool = False
    verdict: CoarseVerdict | None = None

    @field_validator("reason")
    @classmethod
    def _inert_reason(cls, reason: str | None) -> str | None:
        """A reason may quote the worker's stderr: made inert where it enters the record, so no
        progress line, report or page that shows it hands a terminal its escapes."""
        return None if reason is None else inert(reason, multiline=False)
