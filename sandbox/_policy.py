"""The sandbox policy (``policies/sandbox.yaml``), validated so that unsafe values are refused.

A policy with the network on, a writable root, uid 0, or limits above their maxima does not load:
``PolicyError`` names the field, the value received and what is accepted.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from segfactory.errors import PolicyError
from segfactory.gpus import CONTROL_NODES
from segfactory.home import SOURCE_ROOT

POLICY_PATH = SOURCE_ROOT / "policies" / "sandbox.yaml"


class Limits(BaseModel):
    """Resource limits of one sandbox. Every field is enforced from outside the sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpus: float = Field(gt=0)  # CPU cores
    memory_bytes: int = Field(gt=0)  # RAM, swap included; past it: OOM kill, oom_killed=true
    pids: int = Field(gt=0)  # processes + threads; past it: fork/clone fails with EAGAIN
    workspace_bytes: int = Field(gt=0)  # the size of /work's tmpfs; full: killed, event workspace_limit
    # inodes of that tmpfs: files, directories and links (a million empty files take no blocks but
    # would exhaust a filesystem's inodes); full: killed, event workspace_limit
    workspace_files: int = Field(default=100_000, gt=0)
    file_bytes: int = Field(gt=0)  # one file (RLIMIT_FSIZE); past it: write fails with EFBIG
    tmp_bytes: int = Field(gt=0)  # the /tmp tmpfs; past it: ENOSPC
    timeout_s: float = Field(gt=0)  # wall time; past it: SIGTERM, then SIGKILL, timed_out=true


class OutputCaps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    stdout_bytes: int = Field(gt=0)  # bytes kept; past it: truncated=true with the original size
    stderr_bytes: int = Field(gt=0)


class SandboxPolicy(BaseModel):
    """The ticket policy every sandbox runs under, whatever the backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    network: Literal["none"]
    read_only_root: Literal[True]
    uid: int = Field(gt=0)
    gid: int = Field(gt=0)
    image: str
    kill_grace_s: float = Field(gt=0, le=60)
    # niceness of everything a sandbox runs: on a shared CPU the gate's scorer and the host's own
    # work come before training, so a verdict keeps to its answer time while tickets train beside it
    nice: int = Field(default=10, ge=0, le=19)
    defaults: Limits
    maxima: Limits
    output: OutputCaps
    # /dev nodes a sandbox with an assigned GPU gets besides that GPU's /dev/nvidia<minor> (bwrap;
    # docker's NVIDIA toolkit binds its own set). A GPU node (nvidia<digits>) may not be listed:
    # which GPU a sandbox gets is the scheduler's assignment, never the policy's.
    gpu_control_nodes: tuple[str, ...] = CONTROL_NODES

    @model_validator(mode="after")
    def _only_driver_control_nodes(self) -> SandboxPolicy:
        for name in self.gpu_control_nodes:
            if not re.fullmatch(r"nvidia(ctl|-uvm|-uvm-tools|-modeset)", name):
                raise PolicyError(
                    f"gpu_control_nodes: {name!r} is not an NVIDIA driver control node "
                    "(nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset)"
                )
        return self

    @model_validator(mode="after")
    def _defaults_within_maxima(self) -> SandboxPolicy:
        check_within(self.defaults, self.maxima)
        return self


def check_within(limits: Limits, maxima: Limits) -> None:
    """Raise PolicyError naming the first limit above its maximum."""
    for name, value in limits.model_dump().items():
        top = getattr(maxima, name)
        if value > top:
            raise PolicyError(
                f"sandbox limit {name}={value} is above the policy maximum {top} "
                f"({POLICY_PATH}); ask for less or change the policy"
            )


@lru_cache(maxsize=4)
def load_policy(path: Path = POLICY_PATH) -> SandboxPolicy:
    """Read and validate the policy file; PolicyError on anything unsafe or malformed."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"cannot read sandbox policy {path}: {exc}") from exc
    try:
        return SandboxPolicy.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(
            f"unsafe or invalid sandbox policy {path}: {where}: {first['msg']} "
            f"(received {first.get('input')!r})"
        ) from exc
