"""The ``nnunet`` engine: the real ``nnunetv2`` package, trained within a budget, exported to the ONNX
contract.

``train_nnunet(config, data_dir, out_dir)`` (called by ``vision.train.train`` when
``config.engine == "nnunet"``) writes into ``out_dir``: ``model.onnx`` (normalisation and
softmax folded in, deep supervision off), ``nnunet_plan.json`` (what nnU-Net planned and how
long it trained) and ``result.json``; nnU-Net's own folders sit beneath ``out_dir/nnunet/``.
The run is ``usable`` only if the ONNX graph matches nnU-Net's own code, loading its own final
checkpoint, on ``config.nnunet.parity_images`` dev images: its network in float32 within
``PARITY_ATOL`` and its predictor (which sums tiles in float16) within ``PREDICTOR_ATOL``.

``nnunetv2`` and torch are imported only when a run starts.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from segfactory.errors import DataError
from vision.config import TrainConfig
from vision.data import load_version
from vision.device import pick_device
from vision.result import ONNX_FILE, TrainResult, write_result

log = logging.getLogger(__name__)

PLAN_FILE = "nnunet_plan.json"
MODEL_NAME = "nnunet-2d"  # what result.json reports as the model
PREPROCESS_PROCESSES = 2  # nnU-Net's fingerprint and preprocessing pools (the sandbox has 2 cores)
EXPORT_RESERVE_SHARE = 0.1  # of the budget kept for export and parity, when more than export_reserve_s


def _timed(timings: dict[str, float], key: str, start: float) -> float:
    now = time.monotonic()
    timings[key] = round(now - start, 3)
    return now


def train_nnunet(config: TrainConfig, data_dir: Path, out_dir: Path) -> TrainResult:
    """Plan, preprocess, train within ``config.nnunet.time_budget_s``, export; returns a ``TrainResult``."""
    from vision.nnunet import _export, _train  # deferred: torch and nnunetv2, to train

    started = time.monotonic()
    budget = config.nnunet.time_budget_s
    deadline = started + budget - max(config.nnunet.export_reserve_s, EXPORT_RESERVE_SHARE * budget)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise DataError(f"{out_dir} is not empty; choose a new --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    dirs = _train.point_env(out_dir, config.nnunet.data_workers)
    data = load_version(data_dir)
    train = (np.asarray(data.train.images), np.asarray(data.train.masks))
    if config.max_train_images is not None:
        train = (train[0][: config.max_train_images], train[1][: config.max_train_images])
    n_val = min(config.nnunet.max_val_cases, len(data.dev))
    val = (np.asarray(data.dev.images[:n_val]), np.asarray(data.dev.masks[:n_val]))
    timings: dict[str, float] = {}
    _train.seed_everything(config.seed)
    plans = _train.prepare(config, train, val, dirs, PREPROCESS_PROCESSES)
    now = _timed(timings, "plan_preprocess_s", started)
    device = pick_device(config)
    trainer = _train.make_trainer(plans, config, device)
    schedule = _train.train_within(trainer, deadline, config.epochs)
    now = _timed(timings, "train_s", now)
    size = tuple(int(s) for s in train[0].shape[1:])
    _export.export_nnunet_onnx(trainer.network, out_dir / ONNX_FILE, (size[0], size[1]))
    parity = _export.parity(
        _train.model_folder(dirs),
        out_dir / ONNX_FILE,
        np.asarray(data.dev.images[: config.nnunet.parity_images], dtype=np.float32),
    )
    _timed(timings, "export_parity_s", now)
    timings["total_s"] = round(time.monotonic() - started, 3)
    plan = {
        **_train.plan_summary(plans),
        **schedule,
        "time_budget_s": config.nnunet.time_budget_s,
        "device": str(device),
        "postprocessing": "none (every component kept)",
        "test_time_mirroring": False,
        "timings": timings,
    }
    (out_dir / PLAN_FILE).write_text(json.dumps(plan, indent=2) + "\n")
    log.info(
        "nnU-Net run: %d epochs x %d iterations in %.0f s; ONNX parity max |diff| %.2e",
        schedule["epochs"],
        schedule["iterations_per_epoch"],
        timings["train_s"],
        parity["max_abs_diff"],
    )
    result = TrainResult(
        usable=bool(parity["ok"]),
        model=MODEL_NAME,
        epochs_completed=schedule["epochs"],
        device=str(device),
        reload_ok=bool(parity["ok"]),
        parity=parity,
        timings=timings,
        stopped_reason="stopped before the planned epochs: slower than measured"
        if schedule["stopped_early"]
        else None,
        plan=plan,
        files={p.name: p.name for p in sorted(out_dir.iterdir()) if p.is_file()},
    )
    write_result(out_dir, result)
    return result


__all__ = ["MODEL_NAME", "ONNX_FILE", "PLAN_FILE", "train_nnunet"]
