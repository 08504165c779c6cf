"""The training configuration: YAML validated by pydantic (``extra="forbid"``).

Every range is explicit, and the robustness suite reads these ranges to mark each perturbation
cell ``within_training_range``. A checkpoint stores the config it was trained with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from segfactory.errors import UsageError
from vision.registry import known_models

LossName = Literal["bce", "dice", "focal", "tversky"]
CONFIG_VERSION: Literal[1] = 1
# A proposer (an LLM) writes config patches, and the host sizes memory from them before any sandbox
# starts: every value has an upper bound, and so has one batch's pixels (what memory grows with).
MAX_CROP_PX = 2048  # crop side; the largest image a profile generates is 96 px, imports rarely 2k
MAX_BATCH_PIXELS = 2**25  # batch_size x crop^2: 128 crops of 512 px, 64 x 96 px is 1.8 % of it
RANGE_LIMIT = 1000.0  # an augmentation range's ends (pixels, factors, intensities; finite)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(Strict):
    name: str = "unet-mobilenetv3"  # a registered name (vision.registry), or baseline-classical
    decoder_width: int | None = Field(default=None, gt=0, le=512)  # None: the preset's width
    encoder_weights: Path | None = None  # optional local safetensors file; random init otherwise
    stages: int | None = Field(default=None, ge=2, le=7)  # unet-plain's depth; None: sized from the patch

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in known_models():
            raise ValueError(f"model {name!r} is not registered; known: {', '.join(known_models())}")
        return name


class LossTerm(Strict):
    name: LossName
    weight: float = Field(default=1.0, gt=0, le=100)
    focal_gamma: float = Field(default=2.0, ge=0, le=10)  # focal only
    tversky_alpha: float = Field(default=0.3, ge=0, le=1)  # tversky: weight of false positives
    tversky_beta: float = Field(default=0.7, ge=0, le=1)  # tversky: weight of false negatives


class OptimConfig(Strict):
    name: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(default=3e-3, gt=0, le=1)
    weight_decay: float = Field(default=1e-4, ge=0, le=1)
    momentum: float = Field(default=0.9, ge=0, lt=1)  # sgd only
    nesterov: bool = False  # sgd only: Nesterov momentum (nnU-Net: momentum 0.99, nesterov)

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> OptimConfig:
        if self.nesterov and (self.name != "sgd" or self.momentum <= 0):
            raise ValueError("nesterov needs optim.name sgd and a momentum above 0")
        return self


class ScheduleConfig(Strict):
    name: Literal["constant", "cosine", "onecycle", "poly"] = "cosine"  # poly: (1 - t)^0.9, nnU-Net's
    warmup_epochs: int = Field(default=0, ge=0, le=10_000)


class Range(Strict):
    """A closed interval [low, high] sampled uniformly; low == high means a fixed value."""

    low: float = Field(ge=-RANGE_LIMIT, le=RANGE_LIMIT)
    high: float = Field(ge=-RANGE_LIMIT, le=RANGE_LIMIT)

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.low > self.high:
            raise ValueError(f"range low {self.low} > high {self.high}")
        return self


class AugmentConfig(Strict):
    """Augmentations, each with an explicit range; ``p`` is the chance one is applied to an image."""

    p: float = Field(default=0.5, ge=0, le=1)
    flip: bool = True  # horizontal and vertical flips, and 90-degree rotations
    shift_px: Range = Range(low=0, high=0)  # translation in pixels (wrap-free, zero fill)
    scale: Range = Range(low=1, high=1)  # magnification factor
    gain: Range = Range(low=1, high=1)  # multiplicative intensity gain
    offset: Range = Range(low=0, high=0)  # additive intensity offset
    gamma: Range = Range(low=1, high=1)  # intensity gamma
    noise_std: Range = Range(low=0, high=0)  # additive Gaussian noise std (intensity units)
    blur_sigma: Range = Range(low=0, high=0)  # Gaussian blur sigma in pixels
    gradient: Range = Range(low=0, high=0)  # additive linear ramp amplitude (scatter-like)


class SamplingConfig(Strict):
    crop: int | None = Field(default=None, gt=0, le=MAX_CROP_PX)  # crop side in pixels; None: whole images
    defect_centred_p: float = Field(default=0.0, ge=0, le=1)  # share of crops centred on a void
    rare_oversample: float = Field(default=1.0, ge=1, le=1000)  # weight of images holding a small void
    rare_area_px: int = Field(
        default=16, gt=0, le=MAX_CROP_PX**2
    )  # "small void": area below this many pixels


class NnunetConfig(Strict):
    """The ``nnunet`` engine: the real ``nnunetv2`` package plans, preprocesses and trains (2D).

    nnU-Net picks the network, patch and batch itself; what stays ours is how long it trains.
    ``time_budget_s`` is the whole worker run (export included): planning and preprocessing are
    timed, the first epoch is timed, and the epoch count (hence the poly schedule's length) is
    set from what is left. Past the budget the sandbox kills the worker, so it is sized below it.
    """

    time_budget_s: float = Field(default=300.0, gt=0, le=86_400)  # device-seconds the worker may use
    iterations_per_epoch: int = Field(default=50, ge=1, le=1000)  # nnU-Net's own is 250 (with 1000 epochs)
    val_iterations: int = Field(default=5, ge=1, le=100)  # nnU-Net's per-epoch pseudo-Dice batches (logging)
    export_reserve_s: float = Field(
        default=25.0, ge=0, le=3600
    )  # kept back for ONNX export and the parity check
    data_workers: int = Field(default=1, ge=0, le=16)  # nnUNet_n_proc_DA; 0: augmentation in the main process
    max_val_cases: int = Field(default=32, ge=1, le=10_000)  # dev images nnU-Net logs its pseudo Dice on
    parity_images: int = Field(default=8, ge=1, le=256)  # dev images the ONNX-vs-predictor check uses


class ValidationConfig(Strict):
    """The images carved from the training split (``vision.holdout``: by content hash and ``seed``,
    so every ticket on the same data carves the same ones), never trained on; the epoch kept is
    the one with the best object F1 on them. ``fraction`` 0: nothing is carved, the last epoch is
    kept. A package chooses its threshold on the same carve (``vision.packaging``)."""

    fraction: float = Field(default=0.0, ge=0.0, le=0.5)  # share of the training images carved
    seed: int = Field(default=0, ge=0)


class TrainConfig(Strict):
    version: Literal[1] = CONFIG_VERSION
    # segfactory: this package's trainer (vision.train). nnunet: the nnunetv2 package (vision.nnunet);
    # then ``model``, ``loss``, ``optim``, ``schedule``, ``augment``, ``sampling`` and ``batch_size`` are
    # nnU-Net's own, planned from the data, and ``epochs`` only caps the budget-sized epoch count.
    engine: Literal["segfactory", "nnunet"] = "segfactory"
    nnunet: NnunetConfig = NnunetConfig()
    # unet-plain only: the loss is also taken on every lower decoder stage, weighted 1/2^k and
    # normalised, the lowest-resolution stage weighted 0 (nnU-Net's deep supervision).
    deep_supervision: bool = False
    model: ModelConfig = ModelConfig()
    loss: list[LossTerm] = Field(
        default_factory=lambda: [LossTerm(name="bce"), LossTerm(name="dice")], min_length=1
    )
    optim: OptimConfig = OptimConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    epochs: int = Field(gt=0, le=10_000)
    batch_size: int = Field(gt=0, le=4096)
    grad_accum: int = Field(default=1, gt=0, le=1024)  # micro-batches per optimiser step
    augment: AugmentConfig = AugmentConfig()
    sampling: SamplingConfig = SamplingConfig()
    seed: int = Field(default=0, ge=0)
    threshold: float = Field(default=0.5, gt=0, lt=1)  # probability threshold for dev metrics
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # segfactory engine: train as many epochs as fit in this many seconds of the worker's life (its
    # first epochs are timed, and the schedule's length follows), ``epochs`` then being the cap;
    # None: exactly ``epochs``. The runner sets it from a ticket's device budget (vision/train.py).
    time_budget_s: float | None = Field(default=None, gt=0, le=86_400)
    # segfactory engine: the carve of the training images the kept epoch is chosen on (dev never
    # chooses anything a ticket keeps); host-owned, the runner sets it for every ticket
    validation: ValidationConfig = ValidationConfig()
    threads: int | None = Field(default=None, gt=0, le=1024)  # CPU threads; None: torch's default
    max_train_images: int | None = Field(default=None, gt=0, le=10**8)  # cap for quick runs; None: all

    @model_validator(mode="after")
    def _plain_only(self) -> TrainConfig:
        if self.deep_supervision and self.model.name != "unet-plain":
            raise ValueError(f"deep_supervision needs model.name unet-plain; got {self.model.name}")
        if self.model.stages is not None and self.model.name != "unet-plain":
            raise ValueError(f"model.stages is unet-plain's; got model {self.model.name}")
        crop = self.sampling.crop
        if crop is not None and self.batch_size * crop * crop > MAX_BATCH_PIXELS:
            raise ValueError(
                f"batch_size {self.batch_size} x crop {crop}^2 is {self.batch_size * crop * crop} pixels "
                f"a batch, above MAX_BATCH_PIXELS={MAX_BATCH_PIXELS}"
            )
        return self


def _field_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse_config(data: Any, source: str = "config") -> TrainConfig:
    """Validate a mapping as a TrainConfig; a missing or wrong-typed field is a UsageError."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: a training config must be a YAML mapping; got {type(data).__name__}")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{source}: invalid training config: {_field_error(exc)}") from None


def load_config(path: Path) -> TrainConfig:
    """Read and validate a YAML training config."""
    if not path.is_file():
        raise UsageError(f"training config {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML ({exc})") from None
    return parse_config(data, str(path))


def dump_config(config: TrainConfig) -> str:
    """The config as YAML (what a checkpoint and the sandbox worker carry)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
