"""User separation (trust rule 1): the gate runs as ``segfactory-gate``, which alone owns the vault.

Started as root, ``init`` calls ``ensure_users()`` (system users ``segfactory`` and
``segfactory-gate``, group ``segfactory``) and ``lock_vault()`` (vault owned by the gate user,
directories 0700, files 0600). Any other user then gets EACCES on every vault file; root still
bypasses modes, which is why the orchestrator should run as ``segfactory``.

``gate_launcher(paths)`` is the command prefix that starts the gate as ``segfactory-gate`` in
its own mount namespace. Runtime directories under a parent the gate user cannot traverse (such
as ``/root`` at mode 0700) are bind-mounted back into place under a private tmpfs inside that
namespace only: the parents keep their modes on the host.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from gate.pinned import PINNED_DIR, make_read_only
from segfactory.errors import HomeError

GATE_USER = "segfactory-gate"
ORCHESTRATOR_USER = "segfactory"
GROUP = "segfactory"
NOLOGIN = "/usr/sbin/nologin"
STAGE_ROOT = "/mnt"  # covered by a namespace-private tmpfs while binds are staged


def is_root() -> bool:
    return os.geteuid() == 0


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure_users() -> None:
    """Create the group and both system users if missing (root only)."""
    if not is_root():
        raise HomeError("creating the segfactory users needs root")
    _create(lambda: group_exists(GROUP), ["groupadd", "--system", GROUP])
    _create(
        lambda: user_exists(ORCHESTRATOR_USER),
        ["useradd", "--system", "--no-create-home", "--shell", NOLOGIN, "--gid", GROUP, ORCHESTRATOR_USER],
    )
    _create(
        lambda: user_exists(GATE_USER),
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            NOLOGIN,
            "--user-group",
            "--groups",
            GROUP,
            GATE_USER,
        ],
    )


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _create(exists: Callable[[], bool], argv: list[str]) -> None:
    """Run ``argv`` (groupadd, useradd) unless ``exists()``; a failure is an error only while it
    still does not exist, since two ``init`` started at once both see it missing and one loses."""
    if exists():
        return
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0 and not exists():
        raise HomeError(f"{argv[0]} {argv[-1]} failed ({proc.returncode}): {proc.stderr.strip()}")


def _lock_pinned(pinned_root: Path) -> None:
    """Pinned copies belong to root and stay read-only: the gate user reads them, never writes or
    chmods them (so neither bytecode nor a planted module can land in the code it runs)."""
    if not pinned_root.is_dir():
        return
    for copy in pinned_root.iterdir():
        if not copy.is_dir() or copy.is_symlink():
            continue
        for root, dirs, files in os.walk(copy):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), 0, 0, follow_symlinks=False)
        os.chown(copy, 0, 0)
        make_read_only(copy)


def lock_vault(vault: Path) -> None:
    """Give the vault to the gate user: directories 0700, files 0600; pinned copies to root, read-only."""
    entry = pwd.getpwnam(GATE_USER)
    pinned_root = Path(vault) / PINNED_DIR
    for root, dirs, files in os.walk(vault):
        if Path(root) == pinned_root:
            dirs[:] = []  # the copies below are root's (``_lock_pinned``)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chmod(root, 0o700)
        for name in files:
            path = os.path.join(root, name)
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
            if not os.path.islink(path):
                os.chmod(path, 0o600)
    _lock_pinned(pinned_root)


def prepare_socket_dir(path: Path) -> None:
    """The gate's own socket directory: owned by the gate user, group segfactory, mode 0750."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, pwd.getpwnam(GATE_USER).pw_uid, grp.getgrnam(GROUP).gr_gid)
    os.chmod(path, 0o750)


def vault_is_separated(vault: Path) -> bool:
    """True when the vault belongs to the gate user (then the gate must run as that user)."""
    return user_exists(GATE_USER) and vault.is_dir() and vault.stat().st_uid == pwd.getpwnam(GATE_USER).pw_uid


def _blocking_ancestor(path: Path) -> Path | None:
    """The top-most ancestor others cannot traverse (no o+x), if any."""
    for parent in reversed(path.resolve().parents):
        if parent != Path("/") and not parent.stat().st_mode & 0o001:
            return parent
    return None


def _mount_script(paths: list[Path], user: str = GATE_USER, extra_groups: tuple[int, ...] = ()) -> str:
    """Shell run as root in a private mount namespace before dropping to ``user`` (with its own
    groups, plus ``extra_groups`` for this process tree only)."""
    groups: dict[Path, list[Path]] = defaultdict(list)
    for path in paths:
        blocker = _blocking_ancestor(path)
        if blocker is not None:
            groups[blocker].append(path.resolve())
    lines = ["set -e", "mount --make-rprivate /", f"mount -t tmpfs -o mode=0755 none {STAGE_ROOT}"]
    for i, (blocker, inner) in enumerate(groups.items()):
        for j, path in enumerate(inner):
            lines += [
                f"mkdir -p {STAGE_ROOT}/{i}_{j}",
                f"mount --rbind {shlex.quote(str(path))} {STAGE_ROOT}/{i}_{j}",
            ]
        lines.append(f"mount -t tmpfs -o mode=0755 none {shlex.quote(str(blocker))}")
        for j, path in enumerate(inner):
            lines += [
                f"mkdir -p {shlex.quote(str(path))}",
                f"mount --rbind {STAGE_ROOT}/{i}_{j} {shlex.quote(str(path))}",
            ]
    entry = pwd.getpwnam(user)
    membership = "--init-groups"
    if extra_groups:
        gids = sorted({*os.getgrouplist(user, entry.pw_gid), *extra_groups})
        membership = "--groups=" + ",".join(str(g) for g in gids)
    lines.append(
        f"exec setpriv --reuid={entry.pw_uid} --regid={entry.pw_gid} {membership} "
        '--inh-caps=-all --bounding-set=-all -- "$@"'
    )
    return "\n".join(lines)


def gate_launcher(paths: list[Path]) -> list[str]:
    """Command prefix: run the rest of argv as the gate user, with ``paths`` reachable."""
    return user_launcher(paths, GATE_USER)


def user_launcher(paths: list[Path], user: str, extra_groups: tuple[int, ...] = ()) -> list[str]:
    """Command prefix: run the rest of argv as ``user`` in a private mount namespace with ``paths``
    reachable; ``extra_groups`` are added for that process tree only (``/etc/group`` is unchanged)."""
    unshare = shutil.which("unshare")
    if unshare is None or not is_root():
        raise HomeError(f"starting a process as {user} needs root and util-linux unshare")
    script = _mount_script(paths, user, extra_groups)
    return [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script, user]


# Set by a root parent for the command it re-starts as ``segfactory``: the sandbox backend it has
# verified (as root, because the verify plants a canary in the vault). Honoured only when not root.
VERIFIED_ENV = "SEGFACTORY_SANDBOX_VERIFIED"


def verified_before_drop(backend: str) -> bool:
    """In a command re-started as ``segfactory``: root verified ``backend`` before the drop."""
    return os.geteuid() != 0 and os.environ.get(VERIFIED_ENV) == backend


# What the orchestrator writes under the home (with the home root itself): a run writes its
# records, its audit log and the dataset versions its top-ups and approved data requests create.
ORCHESTRATOR_DIRS = ("runs", "audit", "datasets")
ORCHESTRATOR_FILE_PREFIX = "state.sqlite"  # the run state and its WAL and shared-memory files


def give_home_to_orchestrator(home_root: Path) -> None:
    """Before dropping to ``segfactory``: the home root, ``runs/``, ``audit/`` and the run state become
    its own, and so does ``datasets/``, where a run creates its top-up versions. The vault stays
    the gate's."""
    entry = pwd.getpwnam(ORCHESTRATOR_USER)
    root = Path(home_root)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    for name in ORCHESTRATOR_DIRS:
        (root / name).mkdir(exist_ok=True)
        for parent, dirs, files in os.walk(root / name):
            os.chown(parent, entry.pw_uid, entry.pw_gid)
            for item in [*dirs, *files]:
                os.chown(os.path.join(parent, item), entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    for path in root.glob(f"{ORCHESTRATOR_FILE_PREFIX}*"):
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
