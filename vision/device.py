"""Which device a run trains on: ``pick_device(config)``, shared by every engine that trains."""

from __future__ import annotations

from typing import TYPE_CHECKING

from segfactory.errors import DataError
from vision.config import TrainConfig

if TYPE_CHECKING:
    import torch


def pick_device(config: TrainConfig) -> torch.device:
    """CUDA when the config asks for it or says ``auto`` and a GPU is there; else the CPU."""
    import torch

    if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DataError("config asks for device cuda but no CUDA device is available")
        return torch.device("cuda")
    return torch.device("cpu")


__all__ = ["pick_device"]
