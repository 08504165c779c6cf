"""What root hands to the command it restarts as ``segfactory``, and how that command takes it.

Three things cross the drop, none of them through a file the orchestrator could read or swap:

- **Its parent.** The restarted command dies with the root process that started it
  (``PR_SET_PDEATHSIG``, set by the command itself once it runs as ``segfactory``, since a
  change of credentials clears it), and checks right after setting it that its parent is still
  the one named in ``PARENT_ENV``: one that died before the signal was armed is caught too.
- **Secrets** (the gate's host credential): written by root into a pipe whose read end the
  command inherits (``SECRETS_ENV`` names the descriptor). The command reads it once at start
  and closes it; nothing lands in its environment, so no process it starts inherits them.
- **A ticket identity** (``TICKET_USERNS_ENV``): a descriptor of a user namespace that root made
  for the orchestrator and that maps exactly two users, the orchestrator as the namespace's root
  and the sandbox user as itself. Entering it (``nsenter --user=/proc/self/fd/N``) lets the
  orchestrator give a workspace to the sandbox user and start a ticket as that uid, on the host
  too, and nothing more: every other user, root included, stays unmapped, so files of root, of
  the gate or of anyone else are out of its reach there as anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

PARENT_ENV = "SEGFACTORY_PARENT_PID"  # the root process the restarted command must die with
SECRETS_ENV = "SEGFACTORY_HANDED_FD"  # descriptor of the pipe that holds the handed secrets
TICKET_USERNS_ENV = "SEGFACTORY_TICKET_USERNS_FD"  # descriptor of the ticket identity namespace
DEATH_SIGNAL = signal.SIGTERM  # what the restarted command gets when its root parent dies
PR_SET_PDEATHSIG = 1  # prctl(2)
MAX_SECRETS_BYTES = 64 * 1024  # what one handover may carry; past it: ValueError (a pipe's buffer)
USERNS_START_S = 5.0  # time for the namespace holder to unshare; past it: OSError

_secrets: dict[str, str] = {}
_parent: list[int] = []  # the parent this process dies with, once ``die_with_parent`` armed it


def die_with_parent() -> None:
    """In a process started by a root parent that named itself in ``PARENT_ENV``: end with
    ``DEATH_SIGNAL`` when that parent ends. Exits at once (with that signal's code) if the parent
    is already gone. The variable is taken out of the environment, so that processes this one
    starts do not take its parent for theirs (``parent_env`` passes it on across an exec)."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit():
        return
    _parent[:] = [int(expected)]
    import ctypes  # deferred: only a restarted command needs it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(expected):  # the parent died before the signal was armed
        sys.stderr.write("segfactory: the root process that started this command has ended; stopping\n")
        os._exit(128 + int(DEATH_SIGNAL))


def parent_env() -> dict[str, str]:
    """For an ``exec`` that replaces this process (same pid, same parent) and changes its
    credentials, which clears the death signal: the entry that lets the new program arm it again."""
    return {PARENT_ENV: str(_parent[0])} if _parent else {}


def hand_over(secrets: dict[str, str]) -> tuple[int, dict[str, str]]:
    """As root: a pipe holding ``secrets``; returns its read end (pass it to the child) and the
    environment entry that names it there. The caller closes the read end after starting it."""
    data = json.dumps(secrets).encode()
    if len(data) > MAX_SECRETS_BYTES:
        raise ValueError(f"handed secrets are {len(data)} bytes, above MAX_SECRETS_BYTES={MAX_SECRETS_BYTES}")
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end, {SECRETS_ENV: str(read_end)}


def take_handed() -> None:
    """In the restarted command: read the secrets root handed over (once) and close the pipe."""
    fd_text = os.environ.pop(SECRETS_ENV, "")
    if not fd_text.isdigit():
        return
    with os.fdopen(int(fd_text), "rb") as pipe:
        data = pipe.read(MAX_SECRETS_BYTES + 1)
    _secrets.update({str(k): str(v) for k, v in json.loads(data or b"{}").items()})


def handed(name: str) -> str | None:
    """A secret root handed to this command, or None."""
    return _secrets.get(name)


def ticket_userns(orchestrator: tuple[int, int], ticket: tuple[int, int]) -> int:
    """As root: a descriptor of a new user namespace owned by the orchestrator's uid, in which
    ``0`` is the orchestrator (``uid, gid``) and the ticket's ``uid, gid`` are themselves; nothing
    else is mapped. The caller passes it on and closes it."""
    (o_uid, o_gid), (t_uid, t_gid) = orchestrator, ticket
    if 0 in (o_uid, o_gid, t_uid, t_gid) or o_uid == t_uid or o_gid == t_gid:
        raise ValueError(
            f"a ticket identity needs two distinct non-root users; got {orchestrator} and {ticket}"
        )
    read_end, write_end = os.pipe()
    holder = subprocess.Popen(
        ["setpriv", f"--reuid={o_uid}", f"--regid={o_gid}", "--clear-groups", "--", "unshare", "--user", "--"]
        + ["/bin/sh", "-c", "read _"],
        stdin=read_end,
        cwd="/",
    )
    os.close(read_end)
    try:
        _await_unshare(holder)
        with open(f"/proc/{holder.pid}/uid_map", "w") as uid_map:
            uid_map.write(f"0 {o_uid} 1\n{t_uid} {t_uid} 1\n")
        with open(f"/proc/{holder.pid}/gid_map", "w") as gid_map:
            gid_map.write(f"0 {o_gid} 1\n{t_gid} {t_gid} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(write_end)  # the holder reads end-of-file and exits; the descriptor keeps the namespace
        holder.wait()


def _await_unshare(holder: subprocess.Popen[bytes]) -> None:
    mine = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + USERNS_START_S
    while os.readlink(f"/proc/{holder.pid}/ns/user") == mine:
        if holder.poll() is not None or time.monotonic() > deadline:
            raise OSError(
                f"the ticket identity holder did not make its namespace within {USERNS_START_S}s "
                f"(exit {holder.returncode}); is util-linux unshare installed and are user namespaces on?"
            )
        time.sleep(0.005)


def ticket_userns_fd() -> int | None:
    """In the restarted command: the ticket identity's descriptor, or None (not after a drop)."""
    value = os.environ.get(TICKET_USERNS_ENV, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd


def adopt() -> None:
    """At the start of every command: take what a root parent handed over, if anything. The
    identity's descriptor is kept but not inherited by processes started without asking for it."""
    die_with_parent()
    take_handed()
    fd = ticket_userns_fd()
    if fd is not None:
        os.set_inheritable(fd, False)
