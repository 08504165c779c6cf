"""The ticket's workspace: its validated config, its code copy, and the worker command.

The workspace ``runs/<run>/tickets/<id>/work/`` is made fresh by the host and mounted read-write
at ``/work``. Everything in it after the run is untrusted (see ``runner._copyout``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from runner._policy import CODE_DIR, WORKSPACE_MOUNT, code_files
from runner.inputs import CHECKPOINT_FILE
from sandbox import load_policy
from segfactory.errors import UsageError
from segfactory.home import SOURCE_ROOT
from segfactory.records import Ticket, TicketKind
from vision.config import TrainConfig, parse_config
from vision.holdout import CARVE_FRACTION, CARVE_SEED
from vision.packaging import PackageSpec

CONFIG_FILE = "config.yaml"
# A budget-sized ticket's worker aims to finish within this share of the ticket's device budget: the
# rest covers the sandbox's start before the worker's clock, copy-out, and an epoch slower than the
# one it was sized from (the sandbox is killed TIMEOUT_MARGIN_S past the whole budget)
SIZED_SHARE = 0.9
PACKAGE_SPEC_FILE = "package.yaml"  # a packaging ticket's vision.packaging.PackageSpec
OUT_DIR = "out"  # beneath the workspace: where the worker writes
TRAINING_PACKAGES = ("vision",)  # copied into <work>/code/ for code tickets
WORKER_ARGS = [
    "--config",
    f"{WORKSPACE_MOUNT}/{CONFIG_FILE}",
    "--data",
    "/data",
    "--out",
    f"{WORKSPACE_MOUNT}/{OUT_DIR}",
]
INIT_MOUNT = "/init"  # a continued ticket's staged checkpoint folder, read-only
INIT_CHECKPOINT = f"{INIT_MOUNT}/{CHECKPOINT_FILE}"
MEMBERS_MOUNT = "/members"  # a packaging ticket's staged member models, read-only
# Code tickets: the code copy goes first on sys.path, then the worker module runs as __main__.
_CODE_BOOT = (
    f"import runpy, sys; sys.path.insert(0, '{WORKSPACE_MOUNT}/{CODE_DIR}'); "
    "runpy.run_module('vision.worker', run_name='__main__', alter_sys=True)"
)


def _deep_merge(base: dict[str, object], patch: dict[str, object]) -> dict[str, object]:
    """``patch`` over ``base``; nested mappings merge, dotted keys (``optim.lr``) address nesting."""
    merged = dict(base)
    for key, value in patch.items():
        head, _, rest = str(key).partition(".")
        if rest:
            value, key = {rest: value}, head
        if isinstance(value, dict) and isinstance(inner := merged.get(key), dict):
            merged[key] = _deep_merge(inner, value)
        else:
            merged[key] = value
    return merged


def _config_patch(ticket: Ticket) -> dict[str, object]:
    """Config tickets: ``change`` is the patch. Other kinds: ``change["config"]`` when present."""
    if ticket.kind == TicketKind.CONFIG:
        return dict(ticket.change)
    patch = ticket.change.get("config", {})
    if not isinstance(patch, dict):
        raise UsageError(f"change.config must be a mapping; got {type(patch).__name__}")
    return patch


def ticket_config(base: Mapping[str, object] | Path, ticket: Ticket) -> dict[str, object]:
    """Base config + the ticket's patch, seed set by the ticket, epochs within its budget; validated
    (``validated_config``), as the config's JSON form."""
    return validated_config(base, ticket).model_dump(mode="json")


def validated_config(base: Mapping[str, object] | Path, ticket: Ticket) -> TrainConfig:
    """Base config + the ticket's patch, seed set by the ticket, epochs within its budget; validated."""

    data = yaml.safe_load(base.read_text()) if isinstance(base, Path) else dict(base)
    if not isinstance(data, dict):
        raise UsageError(f"base config {base} is not a mapping")
    # unvalidated until parse_config below: the recipe's own epochs are read as the YAML gave them
    merged: dict[str, Any] = _deep_merge(data, _config_patch(ticket))
    merged["seed"] = ticket.seed
    recipe_epochs = int(merged.get("epochs", ticket.budget.epochs))
    # a recipe a sized ticket trained (a rung's, when the final continues it) keeps being sized,
    # but by this ticket's own budget, never by the one its parent had
    sized_recipe = merged.pop("time_budget_s", None) is not None
    longer = ticket.budget.epochs > recipe_epochs
    if (longer or sized_recipe) and merged.get("engine", "segfactory") == "segfactory":
        # the ticket asks for more epochs than its recipe (a budget plan's rung or final): it trains
        # as many as its device budget holds, up to that many (vision/train.py sizes them)
        merged["epochs"] = ticket.budget.epochs
        merged["time_budget_s"] = round(SIZED_SHARE * ticket.budget.device_seconds, 1)
    else:
        merged["epochs"] = min(recipe_epochs, ticket.budget.epochs)
    if merged.get("engine", "segfactory") == "segfactory":
        # host-owned: every ticket keeps the epoch best on the same carved-out training images
        merged["validation"] = {"fraction": CARVE_FRACTION, "seed": CARVE_SEED}
    return parse_config(merged, f"ticket {ticket.id}")


def write_config(work: Path, config: Mapping[str, object]) -> None:
    """(Re)write config.yaml without following anything the sandbox may have planted there."""
    text = yaml.safe_dump(config, sort_keys=False).encode()
    dir_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(CONFIG_FILE, dir_fd=dir_fd)  # removes a planted symlink itself, not its target
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(CONFIG_FILE, flags, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(text)
    finally:
        os.close(dir_fd)


def set_aside_output(work: Path, attempt: int) -> None:
    """Rename a previous attempt's ``out`` (whatever it is) to ``out.attempt-<n>``; rename follows no link."""
    dir_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.rename(OUT_DIR, f"{OUT_DIR}.attempt-{attempt}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def materialise(work: Path, ticket: Ticket, config: Mapping[str, object]) -> None:
    """Make the fresh workspace, write config.yaml, and copy and edit the code for code tickets."""
    work.mkdir(parents=True)
    write_config(work, config)
    if ticket.kind == TicketKind.CODE:
        _copy_code(work / CODE_DIR, code_files(ticket))
    _hand_over(work)


def _copy_code(code: Path, files: dict[str, str]) -> None:
    for package in TRAINING_PACKAGES:
        shutil.copytree(
            SOURCE_ROOT / package,
            code / package,
            symlinks=False,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    for name, text in files.items():
        target = code / _relative_to_code(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _relative_to_code(name: str) -> PurePosixPath:
    """A code file's path beneath the code copy (already checked by the refusal rules)."""
    path = PurePosixPath(name)
    base = WORKSPACE_MOUNT / CODE_DIR
    relative = path.relative_to(base) if path.is_absolute() else path
    if ".." in relative.parts or relative.is_absolute() or not relative.parts:
        raise UsageError(f"code file {name!r} is outside {base}")
    return relative


def _hand_over(work: Path) -> None:
    """Let the sandbox user write the workspace (chown when root, else open modes)."""
    uid = gid = None
    if os.geteuid() == 0:
        policy = load_policy()
        uid, gid = policy.uid, policy.gid
    for path in [work, *work.rglob("*")]:
        if uid is not None and gid is not None:
            os.chown(path, uid, gid, follow_symlinks=False)
        os.chmod(path, 0o777 if path.is_dir() else 0o666)


def materialise_package(work: Path, spec: PackageSpec) -> None:
    """A packaging ticket's fresh workspace: ``package.yaml`` only (it trains nothing)."""
    work.mkdir(parents=True)
    (work / PACKAGE_SPEC_FILE).write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    _hand_over(work)


def package_command() -> list[str]:
    """The packaging step's argv inside the sandbox: members read-only, only the train split."""
    return [
        "python",
        "-m",
        "vision.packaging",
        "--members",
        MEMBERS_MOUNT,
        "--data",
        "/data",
        "--out",
        f"{WORKSPACE_MOUNT}/{OUT_DIR}",
        "--spec",
        f"{WORKSPACE_MOUNT}/{PACKAGE_SPEC_FILE}",
    ]


def worker_command(ticket: Ticket, *, init_from: bool = False) -> list[str]:
    """The worker's argv inside the sandbox (``python`` is the mounted runtime); ``init_from``: it
    starts from the checkpoint the host mounted at ``INIT_CHECKPOINT``."""
    args = [*WORKER_ARGS, *(["--init-from", INIT_CHECKPOINT] if init_from else [])]
    if ticket.kind == TicketKind.CODE:
        return ["python", "-c", _CODE_BOOT, *args]
    return ["python", "-m", "vision.worker", *args]
