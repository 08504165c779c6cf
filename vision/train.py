"""The training loop: ``train(config, data_dir, out_dir)``.

Writes into ``out_dir``: ``model.safetensors`` (config in its metadata), ``model.onnx``,
``learning_curve.jsonl`` (one line per epoch with dev metrics), ``resume.pt`` and
``result.json``. A run is ``usable`` only if it finished, its checkpoint reloads to identical
outputs, and its ONNX export matches PyTorch within ``vision.export.PARITY_ATOL``.

Randomness: the model is initialised from ``seed``; epoch ``e`` draws its order, crops and
augmentations from generators seeded with ``(seed, e)``, so a resumed run replays exactly.

Length: ``epochs``, or with ``time_budget_s`` as many epochs as fit in that budget (at most
``epochs``): after each of its first ``SIZING_EPOCHS`` epochs the run re-sizes its length from the
epoch's measured time and what the worker has spent, and the learning-rate schedule follows the
planned length. Such a run's length depends on the machine; ``result.json``'s ``plan`` records it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from segfactory.errors import DataError
from vision._progress import progress_bar
from vision.augment import augment
from vision.checkpoint import (
    MODEL_FILE,
    RESUME_FILE,
    BestEpoch,
    load_model,
    load_resume,
    load_weights,
    read_checkpoint,
    save_checkpoint,
    save_resume,
)
from vision.classical import fit_classical
from vision.config import TrainConfig, dump_config
from vision.data import DatasetVersion, crop_batch, epoch_order, load_version, sample_weights
from vision.device import pick_device
from vision.export import export_onnx, parity, torch_predict
from vision.holdout import held_out
from vision.losses import combined_loss
from vision.metrics import aggregate, per_image_metrics
from vision.models import CLASSICAL, PLAIN_UNET, build_model
from vision.nnunet import train_nnunet
from vision.plain_unet import stages_for
from vision.result import ONNX_FILE, PARITY_IMAGES, TrainResult, write_result
from vision.tiling import DEV_BATCH, TILE_PX, predict_batched

log = logging.getLogger(__name__)

CURVE_FILE = "learning_curve.jsonl"
# A budget-sized run (config.time_budget_s) re-sizes its length after each of its first epochs (the
# first is slower: allocations, caches), and keeps this long for what follows the last epoch:
# reload, ONNX export and the parity check (2-5 s at demo size on a CPU core), then copy-out.
SIZING_EPOCHS = 2
FINALISE_RESERVE_S = 10.0


class NonFiniteLoss(Exception):
    """Raised inside the loop when the loss is NaN or inf."""


def _lr_factor(config: TrainConfig, steps_per_epoch: int, epochs: Callable[[], int] | None = None) -> Any:
    """The learning-rate factor per optimiser step. ``epochs`` gives the run's planned length when
    it may change while training (a budget-sized run); the schedule then follows it."""

    def span() -> tuple[int, int]:
        total = max(1, (epochs() if epochs else config.epochs) * steps_per_epoch)
        warm = config.schedule.warmup_epochs * steps_per_epoch
        if config.schedule.name == "onecycle":
            warm = max(warm, int(0.3 * total))
        return total, warm

    def factor(step: int) -> float:
        total, warm = span()
        if warm and step < warm:
            return (step + 1) / warm
        if config.schedule.name == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total - warm))
        if config.schedule.name == "poly":
            return float((1 - progress) ** 0.9)
        return 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def make_optimizer(config: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    o = config.optim
    if o.name == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay, nesterov=o.nesterov
        )
    return torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay)


def _autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def predict_probs(model: nn.Module, images: np.ndarray, device: torch.device) -> np.ndarray:
    """Probabilities (N, H, W) float32 from a logits model; a large image in tiles (vision.tiling)."""
    model.eval()

    def one(chunk: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(chunk[:, None])).to(device)
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        return torch.sigmoid(model(x).float())[:, 0].cpu().numpy()

    with torch.no_grad(), _autocast(device):
        return predict_batched(one, images, DEV_BATCH)


def dev_metrics(
    model: nn.Module, data: DatasetVersion, config: TrainConfig, device: torch.device
) -> dict[str, float]:
    prob = predict_probs(model, np.asarray(data.dev.images), device)
    return aggregate(per_image_metrics(prob, np.asarray(data.dev.masks), threshold=config.threshold))


def _batches(
    data: DatasetVersion, config: TrainConfig, epoch: int, keep: np.ndarray | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """CPU batches (x, y) of shape (B, 1, h, w) for one epoch, augmented; ``keep``: the indices
    trained on (the carve left out), None: every image up to ``max_train_images``."""
    rng = np.random.default_rng([config.seed, epoch])
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
    images, masks = np.asarray(data.train.images), np.asarray(data.train.masks)
    if config.max_train_images is not None:
        images, masks = images[: config.max_train_images], masks[: config.max_train_images]
    if keep is None:
        order = epoch_order(images.shape[0], sample_weights(masks, config.sampling), rng)
    else:
        order = keep[epoch_order(len(keep), sample_weights(masks[keep], config.sampling), rng)]
    bs = config.batch_size
    for start in range(0, len(order) - bs + 1, bs):  # drop the last partial batch (BatchNorm)
        idx = (
            np.sort(order[start : start + bs])
            if config.sampling.rare_oversample == 1.0
            else order[start : start + bs]
        )
        xb, yb = crop_batch(images[idx], masks[idx], config.sampling, rng)
        x = torch.from_numpy(np.ascontiguousarray(xb)).unsqueeze(1)
        y = torch.from_numpy(yb.astype(np.float32)).unsqueeze(1)
        yield augment(x, y, config.augment, gen)


def carve(data: DatasetVersion, config: TrainConfig) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(indices trained on, indices carved out) of the capped train split; (None, None) when the
    config carves nothing. Too few left to train or to choose on is a DataError."""
    if config.validation.fraction <= 0:
        return None, None
    n = min(len(data.train), config.max_train_images or len(data.train))
    hashes = [str(row["sha256"]) for row in data.train.image_meta[:n]]
    held = np.asarray(held_out(hashes, config.validation.fraction, config.validation.seed), dtype=np.int64)
    keep = np.setdiff1d(np.arange(n), held)
    if len(keep) < config.batch_size:
        raise DataError(
            f"{len(keep)} training images are left after carving {len(held)} out (validation.fraction "
            f"{config.validation.fraction:g}), fewer than one batch ({config.batch_size})"
        )
    return keep, held


def resolve_stages(config: TrainConfig, data: DatasetVersion) -> TrainConfig:
    """unet-plain with ``stages`` None: sized from the training patch (the crop, else the image)."""
    if config.model.name != PLAIN_UNET or config.model.stages is not None:
        return config

    side = config.sampling.crop or min(np.asarray(data.train.images).shape[1:])
    return config.model_copy(
        update={"model": config.model.model_copy(update={"stages": stages_for(int(side))})}
    )


def deep_supervision_weights(n: int) -> list[float]:
    """nnU-Net's: 1/2^k for stage k (full resolution first), the lowest-resolution stage 0, normalised."""
    raw = [1 / 2**k for k in range(n)]
    if n > 1:
        raw[-1] = 0.0
    total = sum(raw)
    return [w / total for w in raw]


def supervised_loss(
    config: TrainConfig, logits: torch.Tensor | list[torch.Tensor], y: torch.Tensor
) -> torch.Tensor:
    """The configured loss; with deep supervision, over every decoder stage against a max-pooled target
    (max pooling, not nnU-Net's nearest sampling, so that a one-pixel void survives at every scale)."""
    if isinstance(logits, torch.Tensor):
        return combined_loss(config.loss, logits, y)
    import torch.nn.functional as F  # noqa: N812

    total = torch.zeros((), device=y.device)
    for weight, out in zip(deep_supervision_weights(len(logits)), logits, strict=True):
        if weight:
            target = y if out.shape[-2:] == y.shape[-2:] else F.adaptive_max_pool2d(y, out.shape[-2:])
            total = total + weight * combined_loss(config.loss, out, target)
    return total


class Trainer:
    """One training run; ``run()`` returns the TrainResult and writes the files."""

    def __init__(
        self, config: TrainConfig, data_dir: Path | DatasetVersion, out_dir: Path, progress: bool
    ) -> None:
        self.config, self.out, self.progress = config, out_dir, progress
        # a DatasetVersion already in memory trains in-process (analysis.planted_vision)
        self.data = data_dir if isinstance(data_dir, DatasetVersion) else load_version(data_dir)
        n_train = min(len(self.data.train), config.max_train_images or len(self.data.train))
        if n_train < config.batch_size:
            raise DataError(f"{n_train} training images are fewer than one batch ({config.batch_size})")
        self.keep, self.held = carve(self.data, config)
        if self.keep is not None:
            n_train = len(self.keep)
        self.steps_per_epoch = n_train // config.batch_size
        self.best: BestEpoch | None = None  # the epoch kept: the best on the carve so far
        self.device = pick_device(config)
        torch.manual_seed(config.seed)
        self.config = config = resolve_stages(config, self.data)
        self.model = build_model(
            config.model.name,
            config.model.decoder_width,
            config.model.encoder_weights,
            stages=config.model.stages,
            deep_supervision=config.deep_supervision,
        )
        self.model.to(self.device)
        if self.device.type == "cuda":
            self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = make_optimizer(config, self.model)
        self.epochs = config.epochs  # the planned length; a budget-sized run re-sizes it (size_to_budget)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, _lr_factor(config, self.steps_per_epoch, lambda: self.epochs)
        )
        self.start_epoch = 0
        self.timings: dict[str, float] = {"train_s": 0.0, "eval_s": 0.0, "train_images": 0.0}
        self.clock_origin = time.perf_counter()  # when the worker's budget started (train() sets it)
        self.plan: dict[str, float | int] = {}

    def start_from(self, path: Path) -> None:
        """Start from a parent's weights (strict); the optimiser and the schedule stay fresh."""
        t0 = time.perf_counter()
        epoch = load_weights(self.model, path)
        self.timings["init_s"] = time.perf_counter() - t0
        log.info("started from %s (its epoch %d) with a fresh schedule", path, epoch)

    def try_resume(self) -> None:
        """Continue from ``resume.pt`` if it was written by a run with the same config."""
        path = self.out / RESUME_FILE
        if not path.is_file():
            return
        state = load_resume(path)
        if state.get("config") != dump_config(self.config):
            raise DataError(f"{path} was written with a different config; use a new --out to start afresh")
        self.model.load_state_dict(state["model"])
        self.best = state.get("best")
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.start_epoch = int(state["epoch"]) + 1
        # a budget-sized run keeps the length it planned (its schedule is that length's)
        self.epochs = int(state.get("epochs_planned", self.config.epochs))
        log.info("resumed at epoch %d", self.start_epoch)

    def _step_batch(self, x: torch.Tensor, y: torch.Tensor, step: int) -> float:
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        with _autocast(self.device):
            logits = self.model(x)
        loss = supervised_loss(self.config, logits, y)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise NonFiniteLoss(f"loss is {value} at step {step}")
        (loss / self.config.grad_accum).backward()
        if (step + 1) % self.config.grad_accum == 0:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.sched.step()
        return value

    def train_epoch(self, epoch: int, tick: Any) -> float:
        self.model.train()
        losses = []
        t0 = time.perf_counter()
        for step, (x, y) in enumerate(_batches(self.data, self.config, epoch, self.keep)):
            losses.append(self._step_batch(x, y, step))
            tick()
        if self.steps_per_epoch % self.config.grad_accum:  # flush a partial accumulation
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.sched.step()
        self.timings["train_s"] += time.perf_counter() - t0
        self.timings["train_images"] += len(losses) * self.config.batch_size
        return float(np.mean(losses))

    def end_epoch(self, epoch: int, loss: float) -> dict[str, float]:
        t0 = time.perf_counter()
        dev = dev_metrics(self.model, self.data, self.config, self.device)
        held = self.score_carve(epoch, dev)
        self.timings["eval_s"] += time.perf_counter() - t0
        save_checkpoint(self.model, self.config, self.out / MODEL_FILE, epoch)
        save_resume(
            self.out / RESUME_FILE,
            {
                "config": dump_config(self.config),
                "epoch": epoch,
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(),
                "epochs_planned": self.epochs,
                "best": self.best,
            },
        )
        line: dict[str, object] = {
            "epoch": epoch,
            "train_loss": loss,
            "lr": self.sched.get_last_lr()[0],
            "dev": dev,
        }
        if held is not None:
            line["carve_object_f1"] = held
        with open(self.out / CURVE_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")
        log.info("epoch %d loss %.4f dev object_f1 %.4f", epoch, loss, dev["object_f1"])
        return dev

    def score_carve(self, epoch: int, dev: dict[str, float]) -> float | None:
        """Object F1 on the carved-out training images; the weights are kept when it is the best so
        far (a tie goes to the later epoch). None when nothing is carved."""
        if self.held is None:
            return None
        f1 = self.carve_f1(self.held)
        if self.best is None or f1 >= self.best["object_f1"]:
            weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            self.best = {"epoch": epoch, "object_f1": f1, "model": weights, "dev": dict(dev)}
        return f1

    def carve_f1(self, held: np.ndarray) -> float:
        """Object F1 of the model now on the carved-out images ``held``."""
        images, masks = np.asarray(self.data.train.images), np.asarray(self.data.train.masks)
        prob = predict_probs(self.model, images[held], self.device)
        rows = per_image_metrics(prob, masks[held], threshold=self.config.threshold)
        return float(aggregate(rows)["object_f1"])

    def keep_best(self, done: int, dev: dict[str, float]) -> dict[str, float]:
        """Put the carve's best epoch into ``model.safetensors`` (and the model) and note it in
        the plan; returns that epoch's dev metrics. Without a carve: the last epoch, ``dev``."""
        if self.best is None or self.held is None:
            return dev
        epoch, f1 = self.best["epoch"], self.best["object_f1"]
        self.plan.update(
            carve_images=len(self.held), selected_epoch=epoch, selected_carve_object_f1=round(f1, 4)
        )
        if epoch != done - 1:
            self.model.load_state_dict(self.best["model"])
            save_checkpoint(self.model, self.config, self.out / MODEL_FILE, epoch)
            log.info("kept epoch %d (carve object F1 %.4f), not the last, %d", epoch, f1, done - 1)
        return self.best["dev"]

    def loop(self) -> tuple[int, str | None, dict[str, float]]:
        """Run the epochs; returns (epochs completed, stop reason, last dev metrics)."""
        done, dev = self.start_epoch, dict[str, float]()
        with progress_bar(
            self.progress, self.config.epochs * self.steps_per_epoch, self.start_epoch * self.steps_per_epoch
        ) as tick:
            epoch = self.start_epoch
            while epoch < self.epochs:
                started = time.perf_counter()
                try:
                    loss = self.train_epoch(epoch, tick)
                except NonFiniteLoss as exc:
                    reason = (
                        f"non-finite loss in epoch {epoch}: {exc}; kept the checkpoint of epoch {epoch - 1}"
                    )
                    log.error("run stopped: %s", reason)
                    return done, reason, dev
                dev = self.end_epoch(epoch, loss)
                done = epoch = epoch + 1
                if self.config.time_budget_s is not None and epoch - self.start_epoch <= SIZING_EPOCHS:
                    self.size_to_budget(done, time.perf_counter() - started)
        return done, None, dev

    def size_to_budget(self, done: int, epoch_s: float) -> None:
        """Set the planned length to the epochs that fit in ``time_budget_s`` (at most ``epochs``,
        at least those done), from the last epoch's time (training and its dev scoring) and what the
        worker has spent so far, keeping ``FINALISE_RESERVE_S`` for the final checks and export."""
        budget = float(self.config.time_budget_s or 0.0)
        spent = time.perf_counter() - self.clock_origin
        left = budget - spent - FINALISE_RESERVE_S
        fit = done + max(0, math.floor(left / max(epoch_s, 1e-3)))
        self.epochs = max(done, min(self.config.epochs, fit))
        self.plan = {
            "time_budget_s": budget,
            "sized_after_epoch": done,
            "spent_s": round(spent, 3),
            "epoch_s": round(epoch_s, 3),
            "epochs_planned": self.epochs,
            "epochs_cap": self.config.epochs,
        }
        log.info(
            "sized to the budget: %d epochs (cap %d) from %.2f s an epoch, %.1f of %.0f s spent",
            self.epochs,
            self.config.epochs,
            epoch_s,
            spent,
            budget,
        )

    def run(self) -> TrainResult:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "config.yaml").write_text(dump_config(self.config))
        t0 = time.perf_counter()
        done, reason, dev = self.loop()
        if reason is None and done > 0:
            dev = self.keep_best(done, dev)
        self.timings["total_train_s"] = time.perf_counter() - t0
        result = TrainResult(
            usable=False,
            stopped_reason=reason,
            model=self.config.model.name,
            epochs_completed=done,
            device=str(self.device),
            dev=dev,
            plan=dict(self.plan),
        )
        if reason is None and done > 0:
            self.final_checks(result)
        t = self.timings
        t["train_images_per_s"] = t["train_images"] / t["train_s"] if t["train_s"] else 0.0
        result.timings = {k: round(v, 4) for k, v in t.items()}
        result.files = {
            p.name: p.name for p in sorted(self.out.iterdir()) if p.is_file() and not p.name.startswith(".")
        }
        write_result(self.out, result)
        return result

    def final_checks(self, result: TrainResult) -> None:
        """Reload-and-infer (identical outputs) and ONNX parity; both must hold for ``usable``."""
        t0 = time.perf_counter()

        # a tile's worth of each image: parity is about the export, and a whole 2048-px radiograph
        # through both runtimes would need memory that the tiled scoring never does
        probe = np.asarray(self.data.dev.images[:PARITY_IMAGES])[:, :TILE_PX, :TILE_PX]
        result.reload_ok, result.parity = reload_and_parity(self.model, self.out, np.ascontiguousarray(probe))
        result.usable = bool(result.reload_ok and result.parity.get("ok"))
        self.timings["checks_s"] = time.perf_counter() - t0


def reload_and_parity(
    model: nn.Module, out: Path, images: np.ndarray
) -> tuple[bool, dict[str, float | bool]]:
    """Reload ``model.safetensors`` into a fresh model, compare outputs, export and compare ONNX."""
    model = model.float().to("cpu").to(memory_format=torch.contiguous_format).eval()
    reloaded, _ = load_model(out / MODEL_FILE)
    reload_ok = bool(np.array_equal(torch_predict(model, images), torch_predict(reloaded, images)))
    export_onnx(reloaded, out / ONNX_FILE, size=(images.shape[1], images.shape[2]))
    return reload_ok, parity(reloaded, out / ONNX_FILE, images)


def train(
    config: TrainConfig,
    data_dir: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    resume: bool = False,
    timings: dict[str, float] | None = None,
    init_from: Path | None = None,
) -> TrainResult:
    """Train per ``config`` on the dataset version ``data_dir``; write the run into ``out_dir``.

    ``timings``: the caller's own (the worker's start-up and imports), recorded beside the run's.
    ``init_from``: a checkpoint whose weights the model starts from (same architecture, else
    DataError before training), with a fresh optimiser and schedule."""
    started = time.perf_counter()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    if init_from is not None and (config.engine == "nnunet" or config.model.name == CLASSICAL):
        raise DataError(
            f"init_from needs the factory's trainer; got engine {config.engine}, model {config.model.name}"
        )
    if config.engine == "nnunet":
        return train_nnunet(config, data_dir, out_dir)
    if config.model.name == CLASSICAL:
        return fit_classical(config, data_dir, out_dir)
    if not resume and out_dir.exists() and any(out_dir.iterdir()):
        raise DataError(f"{out_dir} is not empty; choose a new --out or pass --resume")
    trainer = Trainer(config, data_dir, out_dir, progress)
    trainer.timings.update(timings or {})
    # the budget counts the worker's whole life: its start-up and imports came before this call
    trainer.clock_origin = started - sum((timings or {}).get(k, 0.0) for k in ("startup_s", "imports_s"))
    trainer.timings["setup_s"] = time.perf_counter() - started  # data, model, optimiser
    if init_from is not None:
        trainer.start_from(init_from)
    if resume:
        trainer.try_resume()
    return trainer.run()


def last_good_epoch(out_dir: Path) -> int:
    """Epoch stored in the run's checkpoint (what a NaN-stopped run kept)."""
    return read_checkpoint(out_dir / MODEL_FILE)[2]
