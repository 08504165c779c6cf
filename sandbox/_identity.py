"""Who a ticket runs as: the policy's uid (``policies/sandbox.yaml``), never the orchestrator's.

Started as root, a backend gives the workspace to the policy uid and drops to it (bwrap through
``setpriv``, docker through the container's user). After root's drop to ``segfactory`` the same
holds through the ticket identity root handed over (``segfactory.handover``): inside that user
namespace the orchestrator gives the workspace to the sandbox uid, starts bwrap as that uid on
the host too, and takes the workspace back once the ticket has ended, so that it can copy out
and clean up as before. Without either (a developer's own account, no root anywhere) the
sandbox runs as the caller, and the sandbox boundary alone keeps ticket code out.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from segfactory.errors import SandboxError
from segfactory.handover import ticket_userns_fd
from segfactory.privilege import SAFE_CWD, OwnershipError, chown_tree

CHOWN_TIMEOUT_S = 600  # one workspace handed over or back; past it: SandboxError


def identity_fd() -> int | None:
    """The ticket identity's descriptor when this process runs as neither root nor a developer
    (it was restarted by root as ``segfactory``), else None."""
    return None if os.geteuid() == 0 else ticket_userns_fd()


def as_policy_uid() -> bool:
    """A ticket started here runs as the policy's uid (root, or the ticket identity is held)."""
    return os.geteuid() == 0 or identity_fd() is not None


# Command prefix: run the rest inside the ticket identity (as its root, the orchestrator). The
# identity's descriptor is the prefix's standard input: a shell can move that one away (fd 0),
# where a descriptor above 9 it could not even name.
ENTER = ["nsenter", "--user=/proc/self/fd/0", "--"]


def give_workspace(workspace: Path, uid: int, gid: int) -> None:
    """Before a ticket: the workspace tree becomes ``uid:gid`` (no link followed). As root directly;
    otherwise through the ticket identity; without either, nothing changes."""
    if os.geteuid() == 0:
        try:
            chown_tree(workspace, uid, gid)
        except OwnershipError as exc:
            raise SandboxError(f"cannot give the workspace to the sandbox user: {exc.strerror}") from None
        return
    fd = identity_fd()
    if fd is not None:
        _chown_inside(fd, workspace, uid, gid)


def take_back(workspace: Path) -> None:
    """After a ticket run through the ticket identity: the workspace tree is the caller's again."""
    fd = identity_fd()
    if fd is not None:
        _chown_inside(fd, workspace, 0, 0)  # the identity's root is the orchestrator's own uid and gid


def _chown_inside(fd: int, workspace: Path, uid: int, gid: int) -> None:
    """``chown -R -P -h`` inside the identity: the walk never follows a link, and only the two
    users it maps can be given or taken."""
    proc = subprocess.run(
        [*ENTER, "chown", "-R", "-P", "-h", f"{uid}:{gid}", "--", str(workspace)],
        stdin=fd,
        capture_output=True,
        text=True,
        timeout=CHOWN_TIMEOUT_S,
        cwd=SAFE_CWD,
    )
    if proc.returncode != 0:
        raise SandboxError(
            f"cannot hand the workspace {workspace} to uid {uid} through the ticket identity "
            f"(exit {proc.returncode}): {proc.stderr.strip()[-400:]}"
        )
