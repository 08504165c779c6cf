"""nnU-Net's 2D configuration, planned and trained by the real ``nnunetv2`` package within a time budget.

Steps: the dataset version in raw format (``vision.nnunet._raw``); fingerprint, plan
(nnU-Net's default ``ExperimentPlanner``, untuned) and preprocess the ``2d`` configuration;
train fold 0 (the train split) with ``nnUNetTrainer`` itself, so that its checkpoint is the one
nnU-Net's own predictor loads; export to ONNX; check ONNX against that predictor.

Only the training length is ours. nnU-Net trains 1000 epochs of 250 iterations; here an epoch
is ``iterations_per_epoch`` iterations, the first epochs are timed, and the epoch count is set
to what the remaining budget holds (at most ``epochs``; the epochs shortened when less than one
is left), with the poly schedule's length set to match, so the learning rate still decays to
zero at the end of the run. The loop is
``nnUNetTrainer.run_training`` with that one change (its ``range`` is fixed at start).

nnU-Net reads ``nnUNet_raw``, ``nnUNet_preprocessed`` and ``nnUNet_results`` from the environment
whenever it uses them; they are pointed beneath the run's output folder (``/work/out/nnunet`` in
the sandbox) before anything of nnU-Net runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from vision.config import TrainConfig
from vision.nnunet._raw import RAW_NAME, write_raw, write_splits

log = logging.getLogger(__name__)

DATASET_ID = 501  # any free id: each run has its own nnU-Net folders
DATASET_NAME = f"Dataset{DATASET_ID:03d}_{RAW_NAME}"
CONFIGURATION = "2d"
PLANS = "nnUNetPlans"
TRAINER = "nnUNetTrainer"
WORK_DIR = "nnunet"  # beneath the run's output folder: raw/, preprocessed/, results/
ENV_DIRS = {"nnUNet_raw": "raw", "nnUNet_preprocessed": "preprocessed", "nnUNet_results": "results"}
RESIZE_AFTER_EPOCHS = (
    2  # the epoch count is re-sized after each of the first epochs (warm-up makes the first slow)
)


class ArchKwargs(TypedDict):
    """The network's build arguments in a configuration of nnU-Net's plans (those recorded here)."""

    n_stages: int
    features_per_stage: list[int]
    n_conv_per_stage: list[int]


class Architecture(TypedDict):
    network_class_name: str
    arch_kwargs: ArchKwargs


class Configuration(TypedDict):
    """One configuration of nnU-Net's plans, as far as it is read here."""

    patch_size: list[int]
    batch_size: int
    spacing: list[float]
    normalization_schemes: list[str]
    architecture: Architecture


class Plans(TypedDict):
    """nnU-Net's plans file (``nnUNetPlans.json``) as far as it is read here; its other keys are
    handed to ``nnUNetTrainer`` as nnU-Net wrote them."""

    configurations: dict[str, Configuration]


class PlanSummary(TypedDict):
    """What nnU-Net planned for the configuration (``plan.json`` and the result's ``plan``)."""

    configuration: str
    patch_size: list[int]
    batch_size: int
    n_stages: int
    features_per_stage: list[int]
    n_conv_per_stage: list[int]
    network: str
    normalization: list[str]
    spacing: list[float]


class Schedule(TypedDict):
    """How the run trained within its budget (``train_within``)."""

    epochs: int  # completed
    planned_epochs: int
    iterations_per_epoch: int
    iterations: int
    epoch_seconds: list[float]
    stopped_early: bool  # ended before the planned epochs


def point_env(out_dir: Path, data_workers: int) -> dict[str, Path]:
    """Set nnU-Net's folders (beneath ``out_dir``) and its augmentation worker count."""
    root = (out_dir / WORK_DIR).resolve()
    dirs = {key: root / sub for key, sub in ENV_DIRS.items()}
    for key, path in dirs.items():
        path.mkdir(parents=True, exist_ok=True)
        os.environ[key] = str(path)
    os.environ["nnUNet_n_proc_DA"] = str(data_workers)
    os.environ["nnUNet_compile"] = "false"  # no torch.compile: CPU runs, and the exported module stays plain
    return dirs


def plan_and_preprocess(processes: int) -> Plans:
    """Fingerprint, plan and preprocess the 2D configuration; returns the plans."""
    from nnunetv2.experiment_planning.plan_and_preprocess_api import (
        extract_fingerprints,
        plan_experiments,
        preprocess,
    )

    workers = os.environ.get("nnUNet_n_proc_DA", "1")
    os.environ["nnUNet_n_proc_DA"] = str(max(1, int(workers)))  # the planner sets torch's threads from it
    extract_fingerprints(
        [DATASET_ID],
        num_processes=processes,
        check_dataset_integrity=True,
        clean=True,
        verbose=False,
        show_progress_bar=False,
    )
    plan_experiments([DATASET_ID])
    preprocess([DATASET_ID], PLANS, (CONFIGURATION,), (processes,), verbose=False, show_progress_bar=False)
    os.environ["nnUNet_n_proc_DA"] = workers  # 0 again means augmentation in the training process
    plans: Plans = json.loads(_preprocessed_dataset().joinpath(f"{PLANS}.json").read_text())
    return plans


def _preprocessed_dataset() -> Path:
    return Path(os.environ["nnUNet_preprocessed"]) / DATASET_NAME


def plan_summary(plans: Plans) -> PlanSummary:
    """What nnU-Net planned for 2D: patch, batch, depth, widths, normalisation."""
    cfg = plans["configurations"][CONFIGURATION]
    arch = cfg["architecture"]["arch_kwargs"]
    return {
        "configuration": CONFIGURATION,
        "patch_size": list(cfg["patch_size"]),
        "batch_size": int(cfg["batch_size"]),
        "n_stages": int(arch["n_stages"]),
        "features_per_stage": list(arch["features_per_stage"]),
        "n_conv_per_stage": list(arch["n_conv_per_stage"]),
        "network": cfg["architecture"]["network_class_name"],
        "normalization": list(cfg["normalization_schemes"]),
        "spacing": list(cfg["spacing"]),
    }


def make_trainer(plans: Plans, config: TrainConfig, device: Any) -> Any:
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer

    dataset_json = json.loads((_preprocessed_dataset() / "dataset.json").read_text())
    given = {**plans, "continue_training": False}  # the trainer pops this key (run_training.py sets it)
    trainer = nnUNetTrainer(
        plans=given, configuration=CONFIGURATION, fold=0, dataset_json=dataset_json, device=device
    )
    trainer.num_iterations_per_epoch = config.nnunet.iterations_per_epoch
    trainer.num_val_iterations_per_epoch = config.nnunet.val_iterations
    trainer.num_epochs = config.epochs  # provisional: re-sized after the first epochs
    trainer.save_every = 10**9  # no periodic "latest" checkpoints: the final one is what counts
    return trainer


def _one_epoch(trainer: Any, deadline: float) -> int:
    """One epoch as ``nnUNetTrainer.run_training`` runs it, cut short at ``deadline``; returns its iterations.

    The deadline is checked after every iteration: on a loaded host one epoch can take longer
    than the whole budget had room for, and a worker killed past its budget exports nothing.
    """
    import torch

    trainer.on_epoch_start()
    trainer.on_train_epoch_start()
    outputs = []
    for _ in range(trainer.num_iterations_per_epoch):
        outputs.append(trainer.train_step(next(trainer.dataloader_train)))
        if time.monotonic() > deadline:
            break
    trainer.on_train_epoch_end(outputs)
    with torch.no_grad():
        trainer.on_validation_epoch_start()
        val = [
            trainer.validation_step(next(trainer.dataloader_val))
            for _ in range(trainer.num_val_iterations_per_epoch)
        ]
        trainer.on_validation_epoch_end(val)
    trainer.on_epoch_end()
    return len(outputs)


def _resize(trainer: Any, per_epoch_s: float, deadline: float, cap: int) -> None:
    """Fill the time left before ``deadline``: epochs (at most ``cap``) and, when fewer iterations are
    left than one epoch holds, shorter epochs (never longer); the poly schedule follows the epochs."""
    done = int(trainer.current_epoch)
    per_iteration = per_epoch_s / max(1, int(trainer.num_iterations_per_epoch))  # validation included
    left = int(max(0.0, deadline - time.monotonic()) // max(per_iteration, 1e-6))
    if left < 1 or done >= cap:
        trainer.num_epochs = done
    else:
        epochs = min(cap - done, math.ceil(left / trainer.num_iterations_per_epoch))
        trainer.num_iterations_per_epoch = max(1, min(int(trainer.num_iterations_per_epoch), left // epochs))
        trainer.num_epochs = done + epochs
    trainer.lr_scheduler.max_steps = max(int(trainer.num_epochs), 1)


def train_within(trainer: Any, deadline: float, cap: int) -> Schedule:
    """Train until the budget-sized epoch count is reached or the deadline passes; returns the schedule."""
    trainer.on_train_start()
    times: list[float] = []
    iterations, stopped_early = 0, False
    while trainer.current_epoch < trainer.num_epochs:
        t0 = time.monotonic()
        ran = _one_epoch(trainer, deadline)
        iterations += ran
        times.append(time.monotonic() - t0)
        if ran < trainer.num_iterations_per_epoch or time.monotonic() > deadline:
            stopped_early = trainer.current_epoch < trainer.num_epochs  # the schedule did not reach its end
            break
        if len(times) <= RESIZE_AFTER_EPOCHS:
            _resize(trainer, times[-1], deadline, cap)
        elif trainer.current_epoch < trainer.num_epochs and time.monotonic() + max(times[1:]) > deadline:
            stopped_early = True  # slower than measured (a loaded host): stop rather than be killed
            break
    planned = int(trainer.num_epochs)
    trainer.on_train_end()
    return {
        "epochs": int(trainer.current_epoch),
        "planned_epochs": planned,
        "iterations_per_epoch": int(trainer.num_iterations_per_epoch),
        "iterations": iterations,
        "epoch_seconds": [round(t, 2) for t in times],
        "stopped_early": stopped_early,
    }


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def model_folder(dirs: dict[str, Path]) -> Path:
    """nnU-Net's output folder for the trained configuration (plans.json, dataset.json, fold_0/)."""
    return dirs["nnUNet_results"] / DATASET_NAME / f"{TRAINER}__{PLANS}__{CONFIGURATION}"


def prepare(
    config: TrainConfig,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    dirs: dict[str, Path],
    processes: int,
) -> Plans:
    """Raw export, plan, preprocess and our fold-0 split; returns the plans."""
    raw = write_raw(*train, *val, dirs["nnUNet_raw"], DATASET_ID, RAW_NAME)
    plans = plan_and_preprocess(processes)
    write_splits(_preprocessed_dataset(), raw)
    log.info("nnU-Net planned %s", json.dumps(plan_summary(plans)))
    return plans
