"""Batch augmentations on tensors, each drawn from the config's explicit ranges.

Geometric transforms move image and mask together (mask resampled with nearest neighbour);
intensity, noise and blur touch the image only. All randomness comes from one
``torch.Generator``, so a seed fixes every draw.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vision.config import AugmentConfig, Range


def _draw(r: Range, n: int, gen: torch.Generator) -> torch.Tensor:
    return r.low + (r.high - r.low) * torch.rand(n, generator=gen)


def _active(r: Range, identity: float) -> bool:
    return not (r.low == identity and r.high == identity)


def _flip(x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random element of the 8-element dihedral group per sample (square images)."""
    n = x.shape[0]
    codes = torch.randint(0, 8, (n,), generator=gen).tolist()
    xs, ys = [], []
    for i, code in enumerate(codes):
        xi, yi = x[i], y[i]
        if code & 1:
            xi, yi = xi.flip(-1), yi.flip(-1)
        if code & 2:
            xi, yi = xi.flip(-2), yi.flip(-2)
        if code & 4 and xi.shape[-1] == xi.shape[-2]:
            xi, yi = xi.transpose(-1, -2), yi.transpose(-1, -2)
        xs.append(xi)
        ys.append(yi)
    return torch.stack(xs), torch.stack(ys)


def _affine(
    x: torch.Tensor, y: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shift (pixels) and magnification about the centre; zero fill outside."""
    n, _, h, w = x.shape
    scale = _draw(cfg.scale, n, gen)
    shift = _draw(cfg.shift_px, 2 * n, gen).view(n, 2)
    sign = torch.where(torch.rand(n, 2, generator=gen) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = 1 / scale
    theta[:, 1, 1] = 1 / scale
    theta[:, 0, 2] = sign[:, 0] * shift[:, 0] * 2 / w
    theta[:, 1, 2] = sign[:, 1] * shift[:, 1] * 2 / h
    grid = F.affine_grid(theta.to(x.device), list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    y = F.grid_sample(y, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return x, y


def _blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Per-sample separable Gaussian blur (sigma in pixels, 0 = identity)."""
    n = x.shape[0]
    radius = max(1, math.ceil(3 * float(sigma.max())))
    t = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    s = sigma.to(x.device).clamp(min=1e-3).view(n, 1)
    k = torch.exp(-0.5 * (t.view(1, -1) / s) ** 2)
    k = k / k.sum(dim=1, keepdim=True)  # (n, 2r+1)
    xs = x.view(1, n, *x.shape[-2:])
    xs = F.conv2d(F.pad(xs, (radius, radius, 0, 0), mode="replicate"), k.view(n, 1, 1, -1), groups=n)
    xs = F.conv2d(F.pad(xs, (0, 0, radius, radius), mode="replicate"), k.view(n, 1, -1, 1), groups=n)
    return xs.view_as(x)


def _gradient(x: torch.Tensor, amp: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, h, w = x.shape
    angle = 2 * math.pi * torch.rand(n, generator=gen)
    yy = torch.linspace(-0.5, 0.5, h).view(1, h, 1)
    xx = torch.linspace(-0.5, 0.5, w).view(1, 1, w)
    ramp = torch.cos(angle).view(n, 1, 1) * xx + torch.sin(angle).view(n, 1, 1) * yy
    return x + (amp.view(n, 1, 1) * ramp).unsqueeze(1).to(x.device)


def _mask(p: float, n: int, gen: torch.Generator) -> torch.Tensor:
    return (torch.rand(n, generator=gen) < p).float()


def augment(
    x: torch.Tensor, y: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Augment a CPU batch x (N,1,H,W) in [0,1] and masks y (N,1,H,W); returns new tensors."""
    n = x.shape[0]
    if cfg.flip:
        x, y = _flip(x, y, gen)
    if _active(cfg.shift_px, 0) or _active(cfg.scale, 1):
        x, y = _affine(x, y, cfg, gen)
    if _active(cfg.gain, 1) or _active(cfg.offset, 0):
        on = _mask(cfg.p, n, gen).view(n, 1, 1, 1)
        gain = _draw(cfg.gain, n, gen).view(n, 1, 1, 1)
        offset = _draw(cfg.offset, n, gen).view(n, 1, 1, 1)
        x = on * (x * gain + offset) + (1 - on) * x
    if _active(cfg.gamma, 1):
        on = _mask(cfg.p, n, gen).view(n, 1, 1, 1)
        g = _draw(cfg.gamma, n, gen).view(n, 1, 1, 1)
        x = on * x.clamp(0, 1) ** g + (1 - on) * x
    if _active(cfg.gradient, 0):
        amp = _draw(cfg.gradient, n, gen) * _mask(cfg.p, n, gen)
        x = _gradient(x, amp, gen)
    if _active(cfg.blur_sigma, 0):
        sigma = _draw(cfg.blur_sigma, n, gen) * _mask(cfg.p, n, gen)
        x = _blur(x, sigma)
    if _active(cfg.noise_std, 0):
        std = (_draw(cfg.noise_std, n, gen) * _mask(cfg.p, n, gen)).view(n, 1, 1, 1)
        x = x + std * torch.randn(x.shape, generator=gen)
    return x.clamp(0, 1), y
