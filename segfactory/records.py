"""Typed records that cross every boundary in segfactory.

This module imports nothing from the rest of segfactory, so any process (the gate's pinned
copy included) can load it without pulling in agents, runner or sandbox code.

Every record is a pydantic model with ``extra="forbid"`` and a ``schema_version``; a record
from a newer or older schema is refused rather than guessed at.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION: Literal[1] = 1


class Record(BaseModel):
    """Base for every record: no unknown fields, immutable after creation, versioned."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = SCHEMA_VERSION


class Result(BaseModel):
    """Base for a result that a command prints with ``--json`` or writes to a file.

    Immutable, no unknown fields. It is dumped with ``exclude_unset`` (``as_json``), so a key
    that applies only in some cases (a comparison, a robustness suite) is absent, not null.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class Arm(StrEnum):
    """Who or what produced a ticket; the controls are arms like any other."""

    AGENT = "agent"
    AGENT_CODE = "agent-code"
    SWEEP_TPE = "sweep-tpe"
    SWEEP_RANDOM = "sweep-random"
    NNUNET = "nnunet"  # compare's nnU-Net arm: the real nnunetv2 package in the ticket sandbox
    AA = "aa"
    CURATION = "curation"
    TOPUP = "topup"
    CHALLENGE = "challenge"
    LABEL = "label"


class TicketKind(StrEnum):
    CONFIG = "config"
    DATA = "data"
    CODE = "code"
    CURATION = "curation"
    DATA_REQUEST = "data_request"
    PACKAGE = "package"  # trains nothing: packages DONE tickets' models (runner's TicketRunner.package)


class Tier(StrEnum):
    """Held-back tiers. Only the first two answer queries; the rest are milestone-only."""

    CONFIRM_A = "confirm-a"
    CONFIRM_B = "confirm-b"
    SEALED = "sealed"
    NEVER_QUERIED = "never-queried"
    REAL_HOLDOUT = "real-holdout"


QUERY_TIERS: frozenset[Tier] = frozenset({Tier.CONFIRM_A, Tier.CONFIRM_B})


class Verdict(StrEnum):
    """The only words the gate says to an agent (trust rule 4)."""

    WIN = "WIN"
    NO_WIN = "NO_WIN"
    INVALID = "INVALID"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"


class Direction(StrEnum):
    UP = "up"
    DOWN = "down"
    NONE = "none"


class Budget(Record):
    """What a ticket may spend. Checked against ``policies/budgets.yaml`` before it starts."""

    device_seconds: float = Field(gt=0)
    epochs: int = Field(ge=1)


class ExpectedEffect(Record):
    """A falsifiable prediction: which metric moves, on which slice, which way, by how much."""

    metric: str
    slice: str = "all"
    direction: Direction
    size: float = Field(ge=0)


ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # a run or ticket id: one plain path component
SHA256_PATTERN = r"^[0-9a-f]{64}$"
INCUMBENT = "incumbent"  # Ticket.continues: the current best's weights


class Ticket(Record):
    """One hypothesis to test. ``change`` is a config patch (or a code/data description).

    ``continues`` names the weights the ticket starts from: None, fresh weights; ``"incumbent"``,
    the current best's (for a replicate, those its original started from); or a ticket id of this
    run, that ticket's own recipe and weights (a budget plan's rung continuing its checkpoint).
    The host resolves it to a copied-out checkpoint by hash (``InitFrom``); a proposer may ask only
    for the incumbent.
    """

    id: str = Field(pattern=ID_PATTERN)
    arm: Arm
    kind: TicketKind
    replicate_of: str | None = None
    hypothesis: str = Field(min_length=1, max_length=4000)
    change: dict[str, Any] = Field(default_factory=dict)
    budget: Budget
    expected_effect: ExpectedEffect
    evidence: list[str] = Field(default_factory=list)
    seed: int = Field(ge=0, lt=2**31)
    continues: str | None = Field(default=None, pattern=ID_PATTERN)


class _Ref(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1

    run_id: str = Field(pattern=ID_PATTERN)
    ticket_id: str = Field(pattern=ID_PATTERN)
    sha256: str = Field(pattern=SHA256_PATTERN)  # as the runner recorded it at copy-out

    file: ClassVar[str]  # the file's name in the ticket folder


class InitFrom(_Ref):
    """The weights a ticket starts from: a DONE ticket's copied-out checkpoint in this home.

    Host-owned: planned from the home's own records, never written by a proposer. The child trains
    its own config (same architecture: a mismatch is refused) from these weights with a fresh
    optimiser and schedule. A replicate names the same ``InitFrom`` with a new seed.
    """

    file: ClassVar[str] = "model.safetensors"


class MemberModel(_Ref):
    """One member of a packaging ticket's ensemble: a DONE ticket's copied-out ``model.onnx``."""

    file: ClassVar[str] = "model.onnx"


MAX_AUTO_CONCURRENCY = 8  # tickets trained at once when nobody chose; past it more cores idle rather


class ConcurrencyPlan(BaseModel):
    """How many tickets train at once when nobody chose (``runner.Scheduler.auto_concurrency``), and
    why; ``run.json`` keeps it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tickets: int = Field(ge=1, le=MAX_AUTO_CONCURRENCY)
    device: Literal["cpu", "cuda"]
    cores: int | None  # the CPU's cores this process may use (one thread a ticket); None on CUDA
    fit_by_memory: int = Field(ge=0)  # tickets of estimate_bytes the free memory less the reserve holds
    estimate_bytes: int = Field(gt=0)  # one ticket's measured-memory estimate (its base config)
    basis: str  # the same, in one line for people


class Recommendation(Record):
    """An analysis finding turned into a proposed action; ``agents`` turns it into a Ticket."""

    id: str
    evidence: dict[str, Any]
    action: str
    kind: TicketKind
    change: dict[str, Any] = Field(default_factory=dict)
    predicted_effect: ExpectedEffect
    rationale: str = ""
    continues: Literal["incumbent"] | None = None  # the ticket starts from the incumbent's weights


class CoarseVerdict(Record):
    """The gate's whole answer to an agent. It has no score field, by construction."""

    ticket_id: str
    tier: Literal["confirm-a", "confirm-b"]
    verdict: Verdict
    queries_left: int = Field(ge=0)

    @field_validator("tier", mode="before")
    @classmethod
    def _tier_value(cls, value: object) -> object:
        return value.value if isinstance(value, Tier) else value


class Actor(StrEnum):
    PROPOSER = "proposer"
    CODE_AGENT = "code-agent"
    RUNNER = "runner"
    SCHEDULER = "scheduler"
    JUDGE = "judge"
    GATE = "gate"
    SANDBOX = "sandbox"
    CONSOLE = "console"
    HUMAN = "human"
    SYSTEM = "system"


def canonical_json(obj: Any) -> bytes:
    """The one serialisation that hashes are taken over: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class AuditRecord(Record):
    """One line of ``audit/log.jsonl``. ``hash`` = sha256 of the canonical JSON without it."""

    seq: int = Field(ge=0)
    ts: float
    run_id: str | None
    actor: Actor
    event: str
    payload: dict[str, Any]
    prev: str
    hash: str

    def computed_hash(self) -> str:
        body = self.model_dump(mode="json", exclude={"hash"})
        return hashlib.sha256(canonical_json(body)).hexdigest()


class Anchor(BaseModel):
    """The audit chain's head as an anchor store last recorded it (the gate keeps them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(ge=0)
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    ts: float | None = None
    run_id: str | None = None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The hex SHA-256 of a file's bytes, read in chunks (models, splits, pinned code)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
