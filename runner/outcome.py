"""What a ticket ended as: the records the runner returns, writes and audits."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runner.inputs import InitFrom, MemberModel
from segfactory.errors import UsageError
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
    manifest: dict[str, object]  # TrainingManifest.summary(): split paths, counts, content hashes
    manifest_file: str  # the full manifest (every training image hash), in the ticket folder
    dev_metrics: dict[str, float]  # vision.metrics.aggregate over the dev split, confined scorer
    threshold: float
    checkpoint_sha256: str | None = None  # model.safetensors copied out beside the model; None: none written
    checkpoint_bytes: int | None = Field(default=None, gt=0)


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
    sandbox_reported: dict[str, object] | None = None  # result.json as the worker wrote it, untrusted
    sandbox_reported_truncated: bool = False
    verdict: CoarseVerdict | None = None
    init_from: InitFrom | None = None  # the weights it started from (host-planned, hash-checked)
    members: list[MemberModel] = Field(default_factory=list)  # a packaging ticket's ensemble

    def continuation(self) -> InitFrom:
        """The ``InitFrom`` a child names to continue from this ticket's weights."""
        if (
            self.status != TicketStatus.DONE
            or self.evidence is None
            or self.evidence.checkpoint_sha256 is None
        ):
            raise UsageError(
                f"ticket {self.ticket_id} of run {self.run_id} has no copied-out checkpoint "
                f"(status {self.status.value}); only a DONE ticket of the factory's trainer can be continued"
            )
        return InitFrom(run_id=self.run_id, ticket_id=self.ticket_id, sha256=self.evidence.checkpoint_sha256)

    def member(self) -> MemberModel:
        """This ticket's model as a member of a packaging ticket's ensemble."""
        if self.status != TicketStatus.DONE or self.evidence is None:
            raise UsageError(
                f"ticket {self.ticket_id} of run {self.run_id} has no copied-out model "
                f"(status {self.status.value}); only a DONE ticket can join an ensemble"
            )
        return MemberModel(run_id=self.run_id, ticket_id=self.ticket_id, sha256=self.evidence.model_sha256)

    @field_validator("reason")
    @classmethod
    def _inert_reason(cls, reason: str | None) -> str | None:
        """A reason may quote the worker's stderr: made inert where it enters the record, so no
        progress line, report or page that shows it hands a terminal its escapes."""
        return None if reason is None else inert(reason, multiline=False)
