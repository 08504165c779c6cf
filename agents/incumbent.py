"""The incumbent (what every ticket builds on) and the training-input fingerprint.

A ticket patches the **incumbent**: the current best's training config, dataset version and code.
The host records, for every ticket it starts, its lineage (``segfactory.layout.Lineage``: parent
model, the config after patching, the dataset version and its content hash, the code overlay and
the fingerprint) in ``runs/<run>/lineage.jsonl``; a promotion copies that row into
``runs/promotions.jsonl``, so the next ticket, in this run or a later one, builds on what won.

The fingerprint is a SHA-256 over the training inputs that decide what a ticket trains: the
config after patching (without the seed, which every ticket gets fresh from the host), the
dataset version's content hash and the code overlay. A ticket whose fingerprint equals its
parent's would train its parent again under another name; the host refuses it, except for the
kinds whose point is repetition (:data:`REPEAT_KINDS`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agents.validate import BASE_CONFIG_EVIDENCE
from segfactory.errors import UsageError
from segfactory.layout import Lineage, RepeatKind
from segfactory.records import Arm, InitFrom, MemberModel, Ticket, canonical_json

DEFAULT_ACTION_EVIDENCE = "default-action"  # the control: the incumbent retrained with a fresh seed
EXPLORATION_EVIDENCE = "exploration"  # prefix: a ticket from the explorer, not from the analysis
# config keys left out of the fingerprint: host-chosen, never what tells a ticket from its parent
# (the seed is each ticket's own; the carve the kept epoch is chosen on is the same for every ticket)
NOT_FINGERPRINTED = ("seed", "validation")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Incumbent(_Strict):
    """What the next ticket patches. ``ticket_id`` is None for the classical baseline."""

    sha256: str
    model: str
    config: dict[str, JsonValue]  # the training config tickets patch (the run's base for the baseline)
    dataset: str  # dataset version ref, NAME/vK
    dataset_hash: str = ""
    code: dict[str, str] = Field(default_factory=dict)  # code overlay: path -> text
    fingerprint: str = ""
    ticket_id: str | None = None
    run_id: str | None = None
    checkpoint: InitFrom | None = None  # its copied-out weights; None: nothing to continue from

    def weights(self) -> InitFrom:
        """The checkpoint a ticket continues from; UsageError when the best has none."""
        if self.checkpoint is None:
            what = "the classical baseline" if not self.trained else f"ticket {self.ticket_id}'s model"
            raise UsageError(
                f"the incumbent {self.sha256[:12]} ({what}) has no copied-out checkpoint to continue "
                "from; train from fresh weights (continues: null)"
            )
        return self.checkpoint

    @property
    def trained(self) -> bool:
        """False for the classical baseline: nothing of it was trained by a ticket."""
        return self.ticket_id is not None


def fingerprint(
    config: Mapping[str, object],
    dataset_hash: str,
    code: dict[str, str],
    init_from: InitFrom | None = None,
    members: Sequence[MemberModel] = (),
) -> str:
    """SHA-256 of the training inputs: config (seed left out), data content hash, code overlay,
    the hash of the weights it starts from and, for a packaging ticket, its members' hashes (each
    left out of the body when absent, so a fresh ticket's fingerprint is what it always was)."""
    body: dict[str, object] = {
        "config": {k: v for k, v in config.items() if k not in NOT_FINGERPRINTED},
        "data": dataset_hash,
        "code": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(code.items())},
    }
    if init_from is not None:
        body["init"] = init_from.sha256
    if members:
        body["members"] = [m.sha256 for m in members]
    return hashlib.sha256(canonical_json(body)).hexdigest()


def repeat_kind(ticket: Ticket) -> RepeatKind | None:
    """Why ``ticket`` may train what its parent trained, or None (then it must differ)."""
    if ticket.replicate_of is not None:
        return "replicate"
    if ticket.arm is Arm.AA:
        return "aa"
    if ticket.arm is Arm.CHALLENGE:
        return "challenge"
    if ticket.evidence == [BASE_CONFIG_EVIDENCE] and not ticket.change:
        return "base"
    if ticket.evidence == [DEFAULT_ACTION_EVIDENCE] and not ticket.change:
        return "default-action"
    return None


def same_as_parent(row: Lineage) -> str | None:
    """The refusal reason when a non-repeat ticket would train exactly its parent's inputs."""
    if row.repeat is None and row.fingerprint == row.parent_fingerprint:
        return (
            f"ticket {row.ticket_id} trains exactly what its parent {row.parent_sha256[:12]} trained "
            f"(training-input fingerprint {row.fingerprint[:12]}: same config, data {row.dataset} and "
            "code); a change must change something"
        )
    return None


__all__ = [
    "DEFAULT_ACTION_EVIDENCE",
    "EXPLORATION_EVIDENCE",
    "Incumbent",
    "Lineage",
    "fingerprint",
    "repeat_kind",
    "same_as_parent",
]
