"""Host-owned files a ticket reads: copied into its folder, hashed, mounted read-only.

A continued ticket reads its parent's checkpoint, a packaging ticket its members' models. Both
were written by sandboxed code and copied out by the runner, which recorded their sha256 in the
parent's outcome. Before the new ticket starts, each file is copied from the home by
``copy_out`` (every component opened beneath the home root with ``O_NOFOLLOW``, a regular file
with one link, at most ``MAX_STAGED_BYTES``) into a staging folder of the new ticket, and the
hash of the bytes written is compared with the planned one: a file swapped after planning is
refused. The staged copy belongs to the host, mode 0444, outside the workspace, and is hashed
again just before every sandbox start (``verify``), so a swap between staging and mounting is
caught too. The host never parses a checkpoint: safetensors is loaded only in the sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from runner._copyout import MAX_MODEL_BYTES, UnsafeArtifact, copy_out, read_beneath
from runner._launch import HOST_CONFIG_FILE
from runner._workspace import INIT_MOUNT, MEMBERS_MOUNT
from runner.inputs import InitFrom, MemberModel
from runner.outcome import TicketOutcome, TicketStatus
from segfactory.errors import DataError, LimitExceeded
from segfactory.home import Home
from vision.config import TrainConfig
from vision.packaging import MAX_MEMBERS

MAX_STAGED_BYTES = MAX_MODEL_BYTES  # one checkpoint or member model; past it: the ticket is refused
MAX_RECORD_BYTES = 4 * 1024**2  # a parent's outcome.json or host_config.yaml read while planning
INIT_DIR = "init"  # in the ticket folder: the staged checkpoint; mounted read-only at INIT_MOUNT
MEMBERS_DIR = "members"  # in the ticket folder: <i>.onnx per member; mounted read-only at MEMBERS_MOUNT
OUTCOME_FILE = "outcome.json"
ARCHITECTURE_KEYS = ("name", "decoder_width", "stages")  # of the config's ``model``: what the weights fit
_HASH_CHUNK = 1 << 20

log = logging.getLogger(__name__)


class StagingRefused(Exception):
    """A host-owned input cannot be used; the message is the ticket's refusal reason."""


class StagedSwap(DataError):
    """A staged file no longer has the hash it was staged with (someone rewrote it before the start)."""


def _ticket_relpath(home: Home, run_id: str, ticket_id: str, name: str) -> str:
    return str((home.tickets_dir(run_id) / ticket_id / name).relative_to(home.root))


def _parent_outcome(home: Home, ref: InitFrom | MemberModel) -> TicketOutcome:
    """The outcome the runner wrote for the ticket ``ref`` names; refused when there is none."""
    relpath = _ticket_relpath(home, ref.run_id, ref.ticket_id, OUTCOME_FILE)
    try:
        data, truncated = read_beneath(home.root, relpath, cap=MAX_RECORD_BYTES)
        if truncated:
            raise DataError(f"over {MAX_RECORD_BYTES} bytes")
        return TicketOutcome.model_validate_json(data)
    except (OSError, DataError, ValueError) as exc:
        raise StagingRefused(
            f"{_what(ref)} names ticket {ref.ticket_id} of run {ref.run_id}, which has no readable "
            f"outcome in this home ({relpath}: {exc}); name a DONE ticket of this home"
        ) from None


def _what(ref: InitFrom | MemberModel) -> str:
    return "init_from" if isinstance(ref, InitFrom) else "ensemble member"


def _recorded_sha256(ref: InitFrom | MemberModel, outcome: TicketOutcome) -> str | None:
    if outcome.status != TicketStatus.DONE or outcome.evidence is None:
        return None
    if isinstance(ref, InitFrom):
        return outcome.evidence.checkpoint_sha256
    return outcome.evidence.model_sha256


def _check_recorded(home: Home, ref: InitFrom | MemberModel) -> None:
    """The parent is a DONE ticket whose outcome records this very file (by hash) as copied out."""
    recorded = _recorded_sha256(ref, _parent_outcome(home, ref))
    if recorded is None:
        raise StagingRefused(
            f"{_what(ref)} names ticket {ref.ticket_id} of run {ref.run_id}, which copied out no "
            f"{ref.file} (not DONE, or no checkpoint); continue only from a DONE ticket that wrote one"
        )
    if recorded != ref.sha256:
        raise StagingRefused(
            f"{_what(ref)} sha256 {ref.sha256[:12]}... is not the {ref.file} ticket {ref.ticket_id} "
            f"of run {ref.run_id} copied out (recorded {recorded[:12]}...); plan from its outcome"
        )


def _copy_checked(home: Home, ref: InitFrom | MemberModel, dest: Path) -> None:
    """Copy the named file into ``dest`` safely and check the copy's hash against the plan."""
    relpath = _ticket_relpath(home, ref.run_id, ref.ticket_id, ref.file)
    try:
        copied = copy_out(home.root, relpath, dest, cap=MAX_STAGED_BYTES)
    except FileNotFoundError:
        raise StagingRefused(
            f"{_what(ref)} names {relpath}, which is not a file copied out in this home; "
            "name a DONE ticket of this home"
        ) from None
    except (UnsafeArtifact, LimitExceeded) as exc:
        raise StagingRefused(f"{_what(ref)} {relpath} cannot be staged: {exc}") from None
    if copied.sha256 != ref.sha256:
        dest.unlink(missing_ok=True)
        raise StagingRefused(
            f"{_what(ref)} {relpath} hashes to {copied.sha256[:12]}..., the plan says "
            f"{ref.sha256[:12]}...; the file changed after it was planned. Nothing ran"
        )
    os.chmod(dest, 0o444)


def parent_config(home: Home, ref: InitFrom | MemberModel) -> dict[str, Any]:
    """The config the named ticket trained with, from the host's own copy (never its workspace).

    As its YAML reads, unvalidated: ``architecture_mismatch`` reads it defensively, a packaging
    ticket's carve is validated by ``PackageSpec``."""
    relpath = _ticket_relpath(home, ref.run_id, ref.ticket_id, HOST_CONFIG_FILE)
    try:
        data, truncated = read_beneath(home.root, relpath, cap=MAX_RECORD_BYTES)
        loaded = None if truncated else yaml.safe_load(data)
    except (OSError, DataError, yaml.YAMLError) as exc:
        raise StagingRefused(f"{_what(ref)}: the config of {relpath} cannot be read: {exc}") from None
    if not isinstance(loaded, dict):
        raise StagingRefused(f"{_what(ref)}: {relpath} is not a config mapping")
    return loaded


def _model_section(config: dict[str, object]) -> dict[str, object]:
    model = config.get("model")
    return model if isinstance(model, dict) else {}


def architecture_mismatch(parent: dict[str, object], child: dict[str, object]) -> str | None:
    """Why the child's config cannot load the parent's weights, or None when it can (as far as
    the host can tell: a plain U-Net's depth may still be resolved from the crop in the sandbox,
    where the load is strict)."""
    models = [_model_section(config) for config in (parent, child)]
    for config, model in zip((parent, child), models, strict=True):
        if config.get("engine", "segfactory") != "segfactory" or model.get("name") == "baseline-classical":
            return (
                "init_from needs weights of the factory's trainer "
                "(not the nnunet engine or the classical detector)"
            )
    differ = [
        f"model.{key}: parent {models[0].get(key)!r}, child {models[1].get(key)!r}"
        for key in ARCHITECTURE_KEYS
        if models[0].get(key) != models[1].get(key)
    ]
    if differ:
        return (
            "init_from: the child's architecture differs from the parent's ("
            + "; ".join(differ)
            + "); weights load only into the same architecture"
        )
    return None


def stage_init(home: Home, run_id: str, init_from: InitFrom, child: TrainConfig) -> Path:
    """Check ``init_from`` and copy its checkpoint into a fresh staging folder; returns the folder.

    Raises StagingRefused with the reason (nothing is left behind)."""
    _check_recorded(home, init_from)
    reason = architecture_mismatch(parent_config(home, init_from), child.model_dump(mode="json"))
    if reason is not None:
        raise StagingRefused(reason)
    return _staged(home, run_id, lambda folder: _copy_checked(home, init_from, folder / init_from.file))


def stage_members(home: Home, run_id: str, members: Sequence[MemberModel]) -> Path:
    """Check every member and copy its model to ``<i>.onnx`` in a fresh staging folder."""
    if not 1 <= len(members) <= MAX_MEMBERS:
        raise StagingRefused(f"a packaging ticket needs 1 to {MAX_MEMBERS} members; got {len(members)}")
    if len({m.sha256 for m in members}) != len(members):
        raise StagingRefused("ensemble members repeat a model (same sha256); name each model once")
    for member in members:
        _check_recorded(home, member)

    def fill(folder: Path) -> None:
        for index, member in enumerate(members):
            _copy_checked(home, member, folder / member_name(index))

    return _staged(home, run_id, fill)


def member_name(index: int) -> str:
    return f"{index}.onnx"


def _staged(home: Home, run_id: str, fill: Callable[[Path], None]) -> Path:
    tickets = home.tickets_dir(run_id)
    tickets.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".staging-", dir=tickets))
    try:
        fill(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    os.chmod(folder, 0o755)
    return folder


def place(staged: Path, ticket_dir: Path, name: str) -> Path:
    """Move a staging folder into the (now made) ticket folder as ``name``."""
    target = ticket_dir / name
    os.rename(staged, target)
    return target


def discard(staged: Path | None) -> None:
    if staged is not None:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(staged)


def sha256_nofollow(path: Path) -> str:
    """The sha256 of a regular file opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(_HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify(folder: Path, expected: dict[str, str]) -> None:
    """Hash every staged file again just before the sandbox starts; raises StagedSwap on a change."""
    for name, sha256 in expected.items():
        try:
            got = sha256_nofollow(folder / name)
        except OSError as exc:
            raise StagedSwap(f"staged {folder / name} cannot be read before the start: {exc}") from None
        if got != sha256:
            raise StagedSwap(
                f"staged {folder / name} hashes to {got[:12]}... at the start, staged as "
                f"{sha256[:12]}...; it was rewritten after staging, so the ticket does not start"
            )
    unexpected = sorted(set(os.listdir(folder)) - set(expected))
    if unexpected:
        raise StagedSwap(f"staged folder {folder} holds files it was not staged with: {unexpected[:5]}")


__all__ = [
    "INIT_DIR",
    "INIT_MOUNT",
    "MAX_MEMBERS",
    "MAX_STAGED_BYTES",
    "MEMBERS_DIR",
    "MEMBERS_MOUNT",
    "StagedSwap",
    "StagingRefused",
    "discard",
    "member_name",
    "place",
    "stage_init",
    "stage_members",
    "verify",
]
