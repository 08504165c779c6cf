"""Checks a ticket must pass before anything starts: budget within policy, paths in /work.

The budget limits are the profile's ``ticket`` caps in ``policies/budgets.yaml``
(``segfactory.budgets.ticket_caps``: ``max_device_seconds`` and ``max_epochs``). A ticket that
fails a check is REFUSED: no workspace is made, no sandbox starts, no query is spent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from segfactory.budgets import TicketCaps
from segfactory.records import Ticket, TicketKind

WORKSPACE_MOUNT = PurePosixPath("/work")  # where the ticket's workspace appears in the sandbox
CODE_DIR = "code"  # code tickets: the training code copy, beneath the workspace
RUNNABLE_KINDS = frozenset({TicketKind.CONFIG, TicketKind.CODE, TicketKind.DATA, TicketKind.CURATION})
PACKAGE_KINDS = frozenset({TicketKind.PACKAGE})  # what TicketRunner.package runs


def refusal_reason(
    ticket: Ticket, policy: TicketCaps, runnable: frozenset[TicketKind] = RUNNABLE_KINDS
) -> str | None:
    """Why ``ticket`` must not start, or None when it may; ``runnable``: the kinds this route runs."""
    if ticket.kind not in runnable:
        return _kind_reason(ticket.kind, runnable)
    budget = ticket.budget
    if budget.device_seconds > policy.max_device_seconds:
        return (
            f"budget of {budget.device_seconds:g} device-seconds exceeds the policy limit of "
            f"{policy.max_device_seconds:g}; ask for less"
        )
    if budget.epochs > policy.max_epochs:
        return f"budget of {budget.epochs} epochs exceeds the policy limit of {policy.max_epochs}"
    patch = {k: v for k, v in ticket.change.items() if not (k == "files" and ticket.kind == TicketKind.CODE)}
    for where, value in _strings(patch, "change"):
        if _looks_like_path(value) and not _inside_workspace(value):
            return f"{where} = {value!r} points outside the ticket's workspace {WORKSPACE_MOUNT}"
    for name in code_files(ticket):
        if not _inside_workspace(name, base=WORKSPACE_MOUNT / CODE_DIR):
            return f"code file {name!r} is outside the ticket's code copy {WORKSPACE_MOUNT / CODE_DIR}"
    return None


def _kind_reason(kind: TicketKind, runnable: frozenset[TicketKind]) -> str:
    if kind == TicketKind.DATA_REQUEST:
        return f"ticket kind {kind.value!r} is not runnable; it goes to the approvals queue"
    if kind == TicketKind.PACKAGE:
        return "a package ticket trains nothing; run it with TicketRunner.package and its members"
    known = ", ".join(sorted(k.value for k in runnable))
    return f"ticket kind {kind.value!r} does not run here (this route runs: {known})"


def code_files(ticket: Ticket) -> dict[str, str]:
    """A code ticket's file edits: ``change["files"]`` maps a path in the code copy to its text.

    Validation (``agents.validate``) names code paths from the workspace, ``code/vision/...``;
    here they are relative to the code copy itself, so that leading ``code/`` is dropped. Without
    it the file would land in ``code/code/vision/...``, off the import path, and the ticket would
    train the unchanged code under its name.
    """
    files = ticket.change.get("files", {}) if ticket.kind == TicketKind.CODE else {}
    if not isinstance(files, dict):
        return {}
    return {_beneath_code(str(k)): str(v) for k, v in files.items()}


def _beneath_code(name: str) -> str:
    parts = PurePosixPath(name).parts
    return PurePosixPath(*parts[1:]).as_posix() if len(parts) > 1 and parts[0] == CODE_DIR else name


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string in a nested patch, with where it sits."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _looks_like_path(value: str) -> bool:
    return "/" in value or value.startswith(("~", ".")) or "\\" in value


def _inside_workspace(value: str, base: PurePosixPath = WORKSPACE_MOUNT) -> bool:
    """True when ``value`` (absolute, or relative to ``base``) names something beneath ``base``."""
    if "\\" in value or value.startswith("~") or "\x00" in value:
        return False
    path = PurePosixPath(value)
    if ".." in path.parts:
        return False
    full = path if path.is_absolute() else base / path
    return full == base or base in full.parents
