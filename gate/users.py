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

import contextlib
import grp
import os
import pwd
import shlex
import shutil
import stat
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from gate.pinned import PINNED_DIR, make_read_only
from segfactory.errors import HomeError
from segfactory.privilege import OwnershipError, chown_entry, chown_tree, open_dir

GATE_USER = "segfactory-gate"
ORCHESTRATOR_USER = "segfactory"
GROUP = "segfactory"
NOLOGIN = "/usr/sbin/nologin"
STAGE_ROOT = "/mnt"  # covered by a namespace-private tmpfs while binds are staged
GATE_RUN = "gate-run"  # under the home: the served gate's socket and credentials
HOME_MODE = 0o1775  # the home root (root:segfactory): sticky, so only an entry's owner renames it
GATE_RUN_MODE = 0o750  # gate-run/ (segfactory-gate:segfactory)
VAULT_DIR_MODE, VAULT_FILE_MODE = 0o700, 0o600  # the vault's directories and files (the gate user's)


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
        chown_tree(copy, 0, 0)
        make_read_only(copy)


def lock_vault(vault: Path) -> None:
    """Give the vault to the gate user: directories 0700, files 0600; pinned copies to root,
    read-only. The walk never follows a link (``segfactory.privilege.chown_tree``)."""
    entry = pwd.getpwnam(GATE_USER)
    chown_tree(
        vault,
        entry.pw_uid,
        entry.pw_gid,
        dir_mode=VAULT_DIR_MODE,
        file_mode=VAULT_FILE_MODE,
        shallow=frozenset({PINNED_DIR}),  # the copies below are root's (``_lock_pinned``)
    )
    _lock_pinned(Path(vault) / PINNED_DIR)


def prepare_socket_dir(path: Path) -> None:
    """The gate's own socket directory: owned by the gate user, group segfactory, mode 0750.

    An existing one is taken over only when it is a real directory of root or the gate user: one
    that another user made (or a link it planted) is refused, never chowned through."""
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, GATE_RUN_MODE)
    fd = open_dir(path)
    try:
        gate_uid = pwd.getpwnam(GATE_USER).pw_uid
        owner = os.fstat(fd).st_uid
        if owner not in (0, gate_uid):
            raise HomeError(
                f"the gate's socket directory {path} belongs to uid {owner}, not to root or {GATE_USER}; "
                "remove it as root and start the gate again"
            )
        os.fchown(fd, gate_uid, grp.getgrnam(GROUP).gr_gid)
        os.fchmod(fd, GATE_RUN_MODE)
    finally:
        os.close(fd)


def lock_home(home_root: Path) -> None:
    """The home root becomes root's (group segfactory, mode 1775) and ``gate-run/`` the gate's.

    The sticky bit lets the orchestrator create its own files there (the run state and its
    journal, the scheduler's records) while only an entry's owner may rename or remove it: the
    orchestrator can neither move ``vault``, ``gate-run`` or ``home.json`` aside nor put its own
    in their place."""
    fd = open_dir(home_root)
    try:
        os.fchown(fd, 0, grp.getgrnam(GROUP).gr_gid)
        os.fchmod(fd, HOME_MODE)
    finally:
        os.close(fd)
    prepare_socket_dir(Path(home_root) / GATE_RUN)


def vault_is_separated(vault: Path) -> bool:
    """True when the vault belongs to the gate user (then the gate must run as that user)."""
    return user_exists(GATE_USER) and vault.is_dir() and vault.stat().st_uid == pwd.getpwnam(GATE_USER).pw_uid


def path_problem(path: Path, trusted: set[int]) -> str | None:
    """Why another user could replace ``path`` (absolute, links already resolved), or None.

    Every component from ``/`` down must be a directory, not a link, owned by a ``trusted`` uid,
    and no component above the last may be writable by group or others unless it is sticky (then
    only an entry's owner may rename it, and that owner is checked at the next component)."""
    parts = [*reversed(Path(path).parents), Path(path)]
    for depth, part in enumerate(parts):
        try:
            info = os.lstat(part)
        except OSError as exc:
            return f"{part} cannot be examined: {exc.strerror}"
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            return f"{part} is a link or not a directory"
        if info.st_uid not in trusted:
            return f"{part} belongs to uid {info.st_uid} ({_name(info.st_uid)})"
        writable = info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX
        if writable and depth < len(parts) - 1:
            return f"{part} may be written by its group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def vault_problem(vault: Path) -> str | None:
    """Why the gate must not serve ``vault``, or None. It serves only a vault its own user owns
    (mode 0700), reached through directories that root or that user own and no one else may
    rearrange. As root, a vault of any user but root or ``segfactory-gate`` is refused: serving it
    would run, as root, code that user chose."""
    me = os.geteuid()
    gate_uid = pwd.getpwnam(GATE_USER).pw_uid if user_exists(GATE_USER) else None
    owners = {0, gate_uid} if me == 0 and gate_uid is not None else {me}
    path = Path(vault)
    if not path.is_absolute():
        return f"the vault path {vault} is not absolute"
    problem = path_problem(path, {0, *owners})
    if problem is not None:
        return problem
    info = os.lstat(path)
    if info.st_uid not in owners:
        return f"the vault {path} belongs to uid {info.st_uid} ({_name(info.st_uid)}), not to the gate"
    if info.st_mode & 0o077:
        return (
            f"the vault {path} is open to its group or others (mode {stat.S_IMODE(info.st_mode):o}, not 700)"
        )
    return None


def home_problem(home_root: Path) -> str | None:
    """Why root must not prepare ``home_root`` for the drop, or None: a directory above it that
    someone other than root could rearrange (the chown walk would act on what they put there)."""
    root = Path(home_root)
    return path_problem(root.parent, {0}) if root.is_absolute() else f"the home {root} is not absolute"


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


# What the orchestrator writes under the home: a run writes its records, its audit log and the
# dataset versions its top-ups and approved data requests create; at the home root it keeps the
# run state (SQLite, with its journal and WAL beside it), the sweep's study and the scheduler's
# measured profile and estimates. The home root itself stays root's (``lock_home``).
ORCHESTRATOR_DIRS = ("runs", "audit", "datasets")
ORCHESTRATOR_OPTIONAL_DIRS = ("curation",)  # given over when present (curation creates it)
ORCHESTRATOR_FILE_PREFIXES = ("state.sqlite", "optuna.db", "device_profile.json", "memory_estimates.json")


def give_home_to_orchestrator(home_root: Path) -> None:
    """Before dropping to ``segfactory``: the home root becomes root's (``lock_home``) and the
    orchestrator's own parts (``ORCHESTRATOR_DIRS``, the files named by
    ``ORCHESTRATOR_FILE_PREFIXES``) become its, walked without following a link. The vault
    stays the gate's. HomeError when a directory above the home could be rearranged by another
    user, or when a part to give is a link."""
    problem = home_problem(home_root)
    if problem is not None:
        raise HomeError(
            f"refusing to hand the home {home_root} to {ORCHESTRATOR_USER}: {problem}; keep the home under "
            "directories only root can change (the default is /var/lib/segfactory)"
        )
    lock_home(home_root)
    entry = pwd.getpwnam(ORCHESTRATOR_USER)
    root_fd = open_dir(home_root)
    try:
        names = os.listdir(root_fd)
        for name in ORCHESTRATOR_DIRS:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=root_fd)
            _give_dir(root_fd, name, home_root, entry)
        for name in ORCHESTRATOR_OPTIONAL_DIRS:
            if name in names:
                _give_dir(root_fd, name, home_root, entry)
        for name in names:
            if name.startswith(ORCHESTRATOR_FILE_PREFIXES):
                chown_entry(root_fd, name, entry.pw_uid, entry.pw_gid)
    finally:
        os.close(root_fd)


def _give_dir(root_fd: int, name: str, home_root: Path, entry: pwd.struct_passwd) -> None:
    try:
        chown_tree(name, entry.pw_uid, entry.pw_gid, dir_fd=root_fd)
    except OwnershipError as exc:
        raise HomeError(
            f"refusing to hand {Path(home_root) / name} to {ORCHESTRATOR_USER}: {exc.strerror}"
        ) from None
