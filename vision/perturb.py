"""X-ray-plausible perturbations at five severities, deterministic given a seed.

Each perturbation names the training augmentation that covers it (``vision.config.AugmentConfig``
field) and the value that field would need at each severity; a cell is
``within_training_range`` only when that value lies inside the configured range. Banding and
dead/hot pixels have no training augmentation, so they are always extrapolation.
Geometric perturbations (magnification, shift) move the masks with the images.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from vision.config import AugmentConfig

SEVERITIES = (1, 2, 3, 4, 5)

Apply = Callable[[np.ndarray, np.ndarray, float, np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Perturbation:
    name: str
    description: str
    values: tuple[float, ...]  # parameter at severities 1..5
    augment_field: str | None  # AugmentConfig range that covers it (None: nothing does)
    apply: Apply


def _lower_dose(
    x: np.ndarray, y: np.ndarray, sigma: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Extra quantum noise of a lower dose: Gaussian, std ``sigma`` at reading 0.5, ~sqrt(signal)."""
    std = sigma * np.sqrt(np.clip(x, 0, 1) / 0.5)
    return x + std * rng.standard_normal(x.shape).astype(np.float32), y


def _blur(
    x: np.ndarray, y: np.ndarray, sigma: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    return ndimage.gaussian_filter(x, sigma=(0, sigma, sigma), mode="nearest"), y


def _gain(
    x: np.ndarray, y: np.ndarray, gain: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    return x * gain, y


def _scatter(
    x: np.ndarray, y: np.ndarray, amp: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    n, h, w = x.shape
    angle = np.asarray(rng.uniform(0, 2 * np.pi, n))[:, None, None]
    yy = np.linspace(-0.5, 0.5, h)[None, :, None]
    xx = np.linspace(-0.5, 0.5, w)[None, None, :]
    return x + amp * (np.cos(angle) * xx + np.sin(angle) * yy), y


def _banding(
    x: np.ndarray, y: np.ndarray, amp: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Detector line banding: a random offset per row (or column), amplitude ``amp``."""
    n, h, w = x.shape
    rows = amp * rng.standard_normal((n, h, 1))
    cols = amp * rng.standard_normal((n, 1, w))
    by_row = np.asarray(rng.random(n))[:, None, None] < 0.5
    return x + np.where(by_row, rows, cols), y


def _dead_hot(
    x: np.ndarray, y: np.ndarray, frac: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    hit = rng.random(x.shape) < frac
    value = (rng.random(x.shape) < 0.5).astype(np.float32)
    return np.where(hit, value, x), y


def _zoom_one(a: np.ndarray, factor: float, order: int) -> np.ndarray:
    h, w = a.shape
    big = ndimage.zoom(a, factor, order=order, mode="nearest")
    y0, x0 = (big.shape[0] - h) // 2, (big.shape[1] - w) // 2
    return big[y0 : y0 + h, x0 : x0 + w]


def _magnify(
    x: np.ndarray, y: np.ndarray, factor: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    xs = np.stack([_zoom_one(a, factor, 1) for a in x])
    ys = np.stack([_zoom_one(a, factor, 0) for a in y])
    return xs, ys


def _shift(
    x: np.ndarray, y: np.ndarray, px: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[0]
    d = int(round(px))
    signs = rng.choice([-1, 1], size=(n, 2))
    xs, ys = np.empty_like(x), np.zeros_like(y)
    for i in range(n):
        dy, dx = int(signs[i, 0] * d), int(signs[i, 1] * d)
        xs[i] = ndimage.shift(x[i], (dy, dx), order=0, mode="nearest")
        ys[i] = ndimage.shift(y[i], (dy, dx), order=0, mode="constant", cval=0)
    return xs, ys


PERTURBATIONS: dict[str, Perturbation] = {
    p.name: p
    for p in (
        Perturbation(
            "lower_dose",
            "extra quantum noise, std at reading 0.5",
            (0.01, 0.02, 0.04, 0.06, 0.1),
            "noise_std",
            _lower_dose,
        ),
        Perturbation(
            "detector_blur", "Gaussian PSF sigma, pixels", (0.5, 1.0, 1.5, 2.0, 3.0), "blur_sigma", _blur
        ),
        Perturbation(
            "gain_drift", "multiplicative detector gain", (0.95, 0.9, 0.85, 0.8, 0.7), "gain", _gain
        ),
        Perturbation(
            "scatter_gradient",
            "additive linear ramp amplitude",
            (0.05, 0.1, 0.15, 0.2, 0.3),
            "gradient",
            _scatter,
        ),
        Perturbation(
            "banding", "per-row or per-column offset std", (0.005, 0.01, 0.02, 0.03, 0.05), None, _banding
        ),
        Perturbation(
            "dead_hot_pixels",
            "fraction of pixels stuck at 0 or 1",
            (0.001, 0.003, 0.01, 0.02, 0.05),
            None,
            _dead_hot,
        ),
        Perturbation(
            "magnification", "geometric magnification factor", (1.05, 1.1, 1.15, 1.2, 1.3), "scale", _magnify
        ),
        Perturbation("shift", "translation, pixels", (1, 2, 3, 4, 6), "shift_px", _shift),
    )
}


def within_training_range(p: Perturbation, value: float, augment: AugmentConfig | None) -> bool:
    """The perturbation's value lies inside the configured augmentation range."""
    if augment is None or p.augment_field is None:
        return False
    r = getattr(augment, p.augment_field)
    return bool(r.low - 1e-9 <= value <= r.high + 1e-9)


def perturb(
    name: str, severity: int, images: np.ndarray, masks: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Apply one perturbation at one severity (1..5); clipped to [0, 1], float32 and uint8."""
    p = PERTURBATIONS[name]
    rng = np.random.default_rng([seed, list(PERTURBATIONS).index(name), severity])
    x, y = p.apply(images.astype(np.float32), masks, p.values[severity - 1], rng)
    return np.clip(x, 0, 1).astype(np.float32), (y > 0).astype(np.uint8)
