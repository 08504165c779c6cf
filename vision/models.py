"""Segmentation models: a U-Net decoder on a timm encoder, and the preset registry.

Every model maps an image batch (N, 1, H, W) in [0, 1] to logits (N, 1, H, W); the ONNX export
(`vision.export`) appends the sigmoid so the exported graph outputs probabilities.
"""

from __future__ import annotations

from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from torch import nn

from segfactory.errors import DataError
from vision.classical import ClassicalDetector
from vision.plain_unet import PlainUNet, stages_for
from vision.registry import (
    CLASSICAL,
    PLAIN_BASE_WIDTH,
    PLAIN_UNET,
    PRESETS,
    REFERENCE_PRESET,
    Preset,
    get_preset,
    known_models,
)

__all__ = [
    "CLASSICAL",
    "PRESETS",
    "REFERENCE_PRESET",
    "Preset",
    "UNet",
    "build_model",
    "get_preset",
    "known_models",
]


class ConvBlock(nn.Sequential):
    """Two 3x3 conv + BN + ReLU."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """U-Net decoder over a ``features_only`` timm encoder, with a full-resolution image skip.

    The last decoder block sees the raw image again, so a void of one or two pixels is not lost
    to the encoder's stride-2 stem.
    """

    def __init__(self, preset: Preset, decoder_width: int | None = None, weights: Path | None = None) -> None:
        super().__init__()
        self.encoder = timm.create_model(
            preset.encoder, features_only=True, in_chans=1, pretrained=False, out_indices=preset.out_indices
        )
        if weights is not None:
            load_encoder_weights(self.encoder, weights)
        chans: list[int] = list(self.encoder.feature_info.channels())  # type: ignore[union-attr,operator]  # shallow -> deep
        width = decoder_width or preset.decoder_width
        self.blocks = nn.ModuleList()
        c_prev = chans[-1]
        for c_skip in reversed(chans[:-1]):
            self.blocks.append(ConvBlock(c_prev + c_skip, width))
            c_prev = width
        self.final = ConvBlock(c_prev + 1, width)
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.encoder(x)  # list of (N, C_i, H / 2^(i+1), W / 2^(i+1))
        y = feats[-1]
        for block, skip in zip(self.blocks, reversed(feats[:-1]), strict=True):
            y = F.interpolate(y, size=skip.shape[-2:], mode="nearest")
            y = block(torch.cat([y, skip], dim=1))
        y = F.interpolate(y, size=x.shape[-2:], mode="nearest")
        y = self.final(torch.cat([y, x], dim=1))
        return self.head(y)  # (N, 1, H, W) logits


def load_encoder_weights(encoder: nn.Module, path: Path) -> None:
    """Load a local safetensors file into the encoder (never a pickle; nothing is downloaded)."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise DataError(f"encoder weights {path} not found; give a local .safetensors file")
    missing, unexpected = encoder.load_state_dict(load_file(str(path)), strict=False)
    if unexpected:
        raise DataError(f"encoder weights {path} do not fit: unexpected keys {unexpected[:3]}...")


PLAIN_PROBE_PATCH = 64  # px: unet-plain's depth when nothing resolved it


def build_model(
    name: str,
    decoder_width: int | None = None,
    weights: Path | None = None,
    *,
    stages: int | None = None,
    deep_supervision: bool = False,
) -> nn.Module:
    """A fresh model by registry name (``baseline-classical`` is built by ``vision.classical``).

    ``stages`` and ``deep_supervision`` are the plain U-Net's (``unet-plain``).
    """
    if name == CLASSICAL:
        return ClassicalDetector()
    if name == PLAIN_UNET:
        # Training resolves the depth from its patch first (vision.train.resolve_stages) and a
        # checkpoint stores it; a build without it (the scheduler's memory probe knows only the
        # preset name) gets the depth of a PLAIN_PROBE_PATCH-pixel patch.
        depth = stages if stages is not None else stages_for(PLAIN_PROBE_PATCH)
        return PlainUNet(depth, decoder_width or PLAIN_BASE_WIDTH, deep_supervision)
    return UNet(get_preset(name), decoder_width, weights)
