"""The per-profile run defaults of ``policies/run.yaml``: base config, ticket budget, run caps,
the plateau rule, and the CPU-sized variant a GPU-sized profile falls back to without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.actions import load_yaml_policy
from segfactory.errors import UsageError
from segfactory.gpus import host_gpus
from segfactory.home import SOURCE_ROOT
from segfactory.records import Budget

RUN_POLICY = SOURCE_ROOT / "policies" / "run.yaml"
DATASET = "synthetic/v1"  # the dataset version a run trains on (init creates it)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Plateau(_Strict):
    """The written rule that ends a run that has stopped improving."""

    tickets_without_dev_win: int = Field(default=0, ge=0)  # 0: never (the budget ends the run)


class CpuSizing(_Strict):
    """What replaces a GPU-sized profile's config and ticket budget on a machine without a GPU."""

    base_config: str
    ticket: Budget
    run: dict[str, float] = Field(default_factory=dict)  # replaces the profile's run defaults key by key


class RunDefaults(_Strict):
    base_config: str
    ticket: Budget
    run: dict[str, float] = Field(default_factory=dict)  # tickets, device_seconds, wall_seconds
    plateau: Plateau = Plateau()
    explore: bool = True  # fill the batch with TPE around the incumbent when the analysis has nothing new
    default_action: bool = True  # each round on a trained best starts with a fresh-seed re-run (a control)
    cpu: CpuSizing | None = None  # the profile is sized for a GPU; this is its CPU-sized variant
    # Set by ``load_run_defaults``, never in run.yaml: why the CPU-sized variant replaced the profile's
    # own config ("" when it did not). The run says it at start and the report names the config.
    sized_note: str = ""


class RunPolicy(_Strict):
    schema_version: Literal[1]
    profiles: dict[str, RunDefaults]


def load_run_defaults(profile: str, path: Path = RUN_POLICY, *, has_gpu: bool | None = None) -> RunDefaults:
    """One profile of ``policies/run.yaml`` for this machine; a file that does not parse names the
    file and line. A profile sized for a GPU (one with a ``cpu`` variant) gets that variant's config
    and ticket budget where the machine has no NVIDIA GPU (``has_gpu``; None: ask the driver)."""

    policy: RunPolicy = load_yaml_policy(path, RunPolicy)
    if profile not in policy.profiles:
        raise UsageError(f"{path} has no profile {profile!r}; known: {', '.join(policy.profiles)}")
    defaults = policy.profiles[profile]
    if defaults.cpu is None:
        return defaults
    if has_gpu is None:
        has_gpu = bool(host_gpus())
    if has_gpu:
        return defaults
    cpu = defaults.cpu
    note = (
        f"no NVIDIA GPU on this machine: profile {profile!r} uses its CPU-sized config {cpu.base_config} "
        f"({cpu.ticket.device_seconds:g} device-s, {cpu.ticket.epochs} epochs a ticket) instead of "
        f"{defaults.base_config}, which is sized for one GPU"
    )
    return defaults.model_copy(
        update={
            "base_config": cpu.base_config,
            "ticket": cpu.ticket,
            "run": {**defaults.run, **cpu.run},
            "cpu": None,
            "sized_note": note,
        }
    )


__all__ = ["DATASET", "RUN_POLICY", "CpuSizing", "Plateau", "RunDefaults", "RunPolicy", "load_run_defaults"]
