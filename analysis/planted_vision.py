"""The vision models as a planted-cause ``Trainer``: real training, in-process, no files.

``VisionTrainer.fit`` runs ``vision.train.Trainer``'s epochs on arrays already in memory (no
checkpoint, no ONNX export, no sandbox: the planted-cause harness is a test of the analysis,
not a ticket) and returns a ``TorchPredictor``. ``capacity`` shrinks the model by scaling the
U-Net decoder width of the configured preset. torch is imported only when a model is trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from synthetic import generate
from synthetic.params import GenParams
from synthetic.splits import Split
from vision.config import LossTerm, ModelConfig, OptimConfig, SamplingConfig, ScheduleConfig, TrainConfig
from vision.data import DatasetVersion
from vision.registry import get_preset
from vision.train import Trainer, predict_probs

if TYPE_CHECKING:
    from torch import nn

MIN_DECODER_WIDTH = 2  # channels; a shrunk decoder keeps at least this many
NO_OUTPUT_DIR = Path("/nonexistent/planted")  # the in-process trainer writes nothing; never created


@dataclass
class TorchPredictor:
    """A trained torch model as a ``Predictor`` (probabilities on the CPU)."""

    model: nn.Module
    device: Any  # torch.device

    def predict(self, images: np.ndarray) -> np.ndarray:
        return predict_probs(self.model, np.ascontiguousarray(images, dtype=np.float32), self.device)


def shrunk(config: TrainConfig, capacity: float, seed: int) -> TrainConfig:
    """``config`` with ``seed`` and the decoder width scaled by ``capacity`` (1.0: unchanged)."""
    width = config.model.decoder_width or get_preset(config.model.name).decoder_width
    if capacity < 1.0:
        width = max(MIN_DECODER_WIDTH, round(width * capacity))
    model = ModelConfig(
        name=config.model.name, decoder_width=width, encoder_weights=config.model.encoder_weights
    )
    return config.model_copy(update={"seed": seed, "model": model})


def equal_steps(images: np.ndarray, masks: np.ndarray, n: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The training set cycled (or cut) to ``n`` images, so an epoch takes the same optimiser
    steps whatever a planted removal left; ``None`` keeps it as it is."""
    if n is None or images.shape[0] == n:
        return images, masks
    idx = np.resize(np.arange(images.shape[0]), n)
    return images[idx], masks[idx]


@dataclass(frozen=True)
class VisionTrainer:
    """Implements ``analysis.planted.Trainer`` with ``vision.train`` (the configured preset).

    ``images_per_epoch`` fixes the compute: a run that lost images to a planted removal sees the
    rest more often, so a finding reflects what was removed, not fewer optimiser steps.
    """

    config: TrainConfig
    images_per_epoch: int | None = None  # None: one pass over whatever it is given

    def fit(
        self, images: np.ndarray, masks: np.ndarray, *, capacity: float = 1.0, seed: int = 0
    ) -> TorchPredictor:
        import torch

        config = shrunk(self.config, capacity, seed)
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        images, masks = equal_steps(images, masks, self.images_per_epoch)
        split = Split(
            None, np.ascontiguousarray(images, dtype=np.float32), np.ascontiguousarray(masks), [], [], {}
        )
        trainer = Trainer(config, DatasetVersion(train=split, dev=split), NO_OUTPUT_DIR, progress=False)
        for epoch in range(config.epochs):
            trainer.train_epoch(epoch, lambda: None)
        return TorchPredictor(trainer.model, trainer.device)


IMAGE_PX = 64  # side of the planted-cause images
TRAIN_IMAGES, DEV_IMAGES = 512, 512
# Clearer voids than the generator's defaults (dose >= 1000 photons, contrast >= 0.08), so a
# short training reliably learns them; at the default dose some seeds learned nothing in 3 epochs.
PLANTED_PARAMS: dict[str, float] = {"dose_min": 1000.0, "contrast_min": 0.08}
# Magnitude ranges for the vision models (analysis.planted.Ranges): shares of void rows for size
# (largest) and contrast (faintest), share of masks erased, share of decoder width kept. Capacity
# keeps 10-20 % of the decoder (2-3 of 16 channels): at 8 epochs a decoder keeping 29-44 % of its
# width fit and scored within the unplanted seeds' spread (docs/analysis.md), so it planted nothing.
VISION_RANGES: dict[str, tuple[float, float]] = {
    "size": (0.1, 0.25),
    "contrast": (0.15, 0.3),
    "masks": (0.6, 0.9),
    "capacity": (0.1, 0.2),
    "background": (0.0, 1.0),
    "placebo": (0.15, 0.3),
}


def planted_config() -> TrainConfig:
    """The cheapest preset on small crops, 8 epochs, one thread: ~20 s per model on a CPU core.

    8 epochs, not 4: at 4 the unplanted seeds disagreed by up to 0.17 in defect miss rate and a
    null run showed a "finding" (docs/analysis.md); at 8 the CI mix's null runs stay silent."""
    return TrainConfig(
        model=ModelConfig(name="unet-mobilenetv3", decoder_width=16),
        loss=[LossTerm(name="bce"), LossTerm(name="tversky")],  # tversky weighs misses over false alarms
        optim=OptimConfig(lr=0.005),
        schedule=ScheduleConfig(name="cosine"),
        epochs=8,
        batch_size=8,
        sampling=SamplingConfig(crop=32, defect_centred_p=0.9),
        device="cpu",
        threads=1,
        seed=0,
    )


def planted_data(seed: int = 1) -> tuple[Any, Any]:
    """(train, dev) generated sets for the planted-cause runs (seeds ``seed`` and ``seed + 1``)."""
    params = GenParams(**PLANTED_PARAMS)
    return (
        generate(TRAIN_IMAGES, IMAGE_PX, seed, params, workers=1),
        generate(DEV_IMAGES, IMAGE_PX, seed + 1, params, workers=1),
    )
