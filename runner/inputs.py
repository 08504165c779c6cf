"""Host-owned inputs of a ticket: the trained weights it continues from, the models it packages.

A proposer never writes these: the host plans them from tickets this home has run, by run id,
ticket id and the sha256 the runner recorded when it copied the file out. The runner copies the
named file into the new ticket's folder, hashes the copy, refuses the ticket when the hash is
not the planned one, and mounts the copy read-only into the sandbox (docs/runner.md).
"""

from __future__ import annotations

from segfactory.records import ID_PATTERN, SHA256_PATTERN, InitFrom, MemberModel

CHECKPOINT_FILE = InitFrom.file  # in a ticket folder, beside model.onnx: the weights it exported
MODEL_FILE = MemberModel.file

__all__ = ["CHECKPOINT_FILE", "ID_PATTERN", "MODEL_FILE", "SHA256_PATTERN", "InitFrom", "MemberModel"]
