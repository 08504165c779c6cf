"""A plain-convolution U-Net in the shape nnU-Net plans for 2D, sized from the training patch.

nnU-Net's ``PlainConvUNet`` (dynamic-network-architectures), written out so that the factory's
own trainer, configs and sweep can reach it: per stage two 3x3 convolutions, each followed by
instance normalisation and leaky ReLU (slope 0.01); downsampling by a stride-2 convolution;
widths start at ``base_width`` and double per stage up to ``MAX_WIDTH`` (nnU-Net's 2D cap);
upsampling by a stride-2 transposed convolution, then the skip concatenated; a 1x1 head on every
decoder stage. In training with ``deep_supervision`` the model returns the logits of every
decoder stage, full resolution first, so the loss can weigh each (``vision.train``); in eval
mode (dev metrics, ONNX export) only the full-resolution logits (N, 1, H, W).

The depth is sized from the data as nnU-Net does: pool while the bottleneck stays at least
``MIN_BOTTLENECK_PX`` wide (``stages_for``), at most ``MAX_STAGES`` stages.
"""

from __future__ import annotations

import torch
from torch import nn

MAX_WIDTH = 512  # channels: nnU-Net's cap for 2D configurations
MIN_BOTTLENECK_PX = 4  # nnU-Net stops pooling before a feature map edge falls below this
MAX_STAGES = 7  # stages (resolutions) at most


def stages_for(patch_px: int) -> int:
    """Resolutions a patch of ``patch_px`` affords: 64 px -> 5 (64, 32, 16, 8, 4)."""
    stages, side = 1, patch_px
    while side // 2 >= MIN_BOTTLENECK_PX and stages < MAX_STAGES:
        side //= 2
        stages += 1
    return max(2, stages)


def _conv(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1),
        nn.InstanceNorm2d(c_out, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
    )


class PlainUNet(nn.Module):
    def __init__(self, stages: int, base_width: int = 32, deep_supervision: bool = False) -> None:
        super().__init__()
        widths = [min(base_width * 2**i, MAX_WIDTH) for i in range(stages)]
        self.deep_supervision = deep_supervision
        self.encoder = nn.ModuleList()
        c_prev = 1
        for i, width in enumerate(widths):  # stage 0 keeps the resolution, the others halve it
            self.encoder.append(nn.Sequential(_conv(c_prev, width, 1 if i == 0 else 2), _conv(width, width)))
            c_prev = width
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        self.heads = nn.ModuleList()
        for width in reversed(widths[:-1]):  # deep -> shallow
            self.up.append(nn.ConvTranspose2d(c_prev, width, 2, stride=2))
            self.decoder.append(nn.Sequential(_conv(2 * width, width), _conv(width, width)))
            self.heads.append(nn.Conv2d(width, 1, 1))
            c_prev = width

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        skips = []
        for stage in self.encoder:
            x = stage(x)
            skips.append(x)  # (N, C_i, H / 2^i, W / 2^i)
        y = skips.pop()
        every = self.training and self.deep_supervision
        outs = []
        for i, (up, block, head) in enumerate(zip(self.up, self.decoder, self.heads, strict=True)):
            skip = skips.pop()
            y = up(y)[..., : skip.shape[-2], : skip.shape[-1]]  # an odd side rounds up on the way down
            y = block(torch.cat([y, skip], dim=1))
            if every or i == len(self.heads) - 1:
                outs.append(head(y))
        if every:
            return outs[::-1]  # full resolution first
        return outs[-1]  # (N, 1, H, W) logits


__all__ = ["MAX_WIDTH", "PlainUNet", "stages_for"]
