"""Host-owned inputs of a ticket: the trained weights it continues from, the models it packages.

A proposer never writes these: the host plans them from tickets this home has run, by run id,
ticket id and the sha256 the runner recorded when it copied the file out. The runner copies the
named file into the new ticket's folder, hashes the copy, refuses the ticket when the hash is
not the planned one, and mounts the copy read-only into the sandbox (docs/runner.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # a run or ticket id: one plain path component
SHA256_PATTERN = r"^[0-9a-f]{64}$"
CHECKPOINT_FILE = "model.safetensors"  # in a ticket folder, beside model.onnx: the weights it exported
MODEL_FILE = "model.onnx"


class _Ref(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1

    run_id: str = Field(pattern=ID_PATTERN)
    ticket_id: str = Field(pattern=ID_PATTERN)
    sha256: str = Field(pattern=SHA256_PATTERN)  # as the runner recorded it at copy-out

    file: ClassVar[str]  # the file's name in the ticket folder


class InitFrom(_Ref):
    """The weights a ticket starts from: a DONE ticket's copied-out checkpoint in this home.

    The child trains its own config (same architecture: a mismatch is refused) from these weights
    with a fresh optimiser and schedule. A replicate names the same ``InitFrom`` with a new seed.
    """

    file: ClassVar[str] = CHECKPOINT_FILE


class MemberModel(_Ref):
    """One member of a packaging ticket's ensemble: a DONE ticket's copied-out ``model.onnx``."""

    file: ClassVar[str] = MODEL_FILE


__all__ = ["CHECKPOINT_FILE", "MODEL_FILE", "InitFrom", "MemberModel"]
