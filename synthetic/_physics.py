"""X-ray image formation: Beer–Lambert, beam hardening, PSF blur, photon and read noise.

For one image:

1. open-beam field ``B`` (the background type) and a small scatter fraction ``s``;
2. transmission ``I = B * (exp(-A(t_eff)) + s)``, ``A(t) = mu t / (1 + bh t)``
   (``bh = 0`` is pure Beer–Lambert), ``t_eff`` the wall minus the voids' path lengths;
3. detector blur: a Gaussian PSF on ``I``;
4. photon counts with mean ``dose * I``: Poisson below ``GAUSS_MIN_COUNTS``, above it the
   Gaussian approximation ``N(lam, lam)`` (same mean and variance; tested);
5. reading ``gain * counts + offset + N(0, read_noise)``, normalised by ``FULL_SCALE * dose``
   and clipped to [0, 1].

Simplifications (docs/synthetic.md): the blur acts on the expected intensity before noise
(a scintillator blurs after conversion, which correlates the noise); scatter is a constant
fraction, not a spatial kernel; beam hardening is a single-parameter fit, not a spectrum.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TypedDict

import numpy as np

from synthetic._parts import grid
from synthetic._voids import attenuation
from synthetic.params import GenParams

GAUSS_MIN_COUNTS = 30.0  # photons; at or above this mean the Poisson draw is a Gaussian N(lam, lam)
FULL_SCALE = 1.3  # normalised reading 1.0 = this many times the open-beam dose (headroom)
TEXTURE_CELLS = 6  # coarse grid of the low-frequency "texture" background


@lru_cache(maxsize=8)
def _texture_basis(size: int) -> np.ndarray:
    """(S, TEXTURE_CELLS) smooth interpolation weights (normalised Gaussian bumps), read-only."""
    centres = (np.arange(TEXTURE_CELLS) + 0.5) * size / TEXTURE_CELLS
    bumps = np.exp(-0.5 * ((np.arange(size)[:, None] + 0.5 - centres[None, :]) / (size / TEXTURE_CELLS)) ** 2)
    bumps /= bumps.sum(axis=1, keepdims=True)
    bumps.flags.writeable = False
    return bumps


def background(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """Open-beam field around 1.0 for a background type (see synthetic.params.BACKGROUNDS)."""
    yy, xx = grid(size)
    if kind == "gradient":
        gy, gx = rng.uniform(-0.15, 0.15, 2)
        out: np.ndarray = 1.0 + (gy * (yy - size / 2) + gx * (xx - size / 2)) / size
        return out
    if kind == "vignette":
        r2 = ((yy - size / 2) ** 2 + (xx - size / 2) ** 2) / (size * size / 2)
        out = 1.0 - rng.uniform(0.1, 0.3) * r2
        return out
    if kind == "texture":
        coarse = rng.normal(0.0, 0.04, (TEXTURE_CELLS, TEXTURE_CELLS))
        basis = _texture_basis(size)
        out = 1.0 + basis @ coarse @ basis.T
        return out
    return np.ones((size, size))


class Acquisition(TypedDict):
    """One image's acquisition settings; ``images.jsonl`` records them (rounded) in its row."""

    background: str  # one of synthetic.params.BACKGROUNDS
    dose: float  # open-beam photons per pixel
    blur: float  # Gaussian PSF sigma, pixels
    gain: float
    offset: float  # fraction of the open-beam dose
    scatter: float  # fraction of the transmission
    read_noise: float  # counts (std)
    mu: float  # 1/mm
    beam_hardening: float


def acquisition(params: GenParams, rng: np.random.Generator) -> Acquisition:
    """Random acquisition settings for one image."""
    return {
        "background": str(params.backgrounds[int(rng.integers(len(params.backgrounds)))]),
        "dose": float(np.exp(rng.uniform(np.log(params.dose_min), np.log(params.dose_max)))),
        "blur": float(rng.uniform(params.blur_min, params.blur_max)),
        "gain": float(rng.uniform(0.9, 1.1)),
        "offset": float(rng.uniform(0.0, 0.04)),  # fraction of the open-beam dose
        "scatter": float(rng.uniform(0.0, 0.04)),
        "read_noise": params.read_noise,
        "mu": params.mu,
        "beam_hardening": params.beam_hardening,
    }


def photon_counts(lam: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Poisson counts; the Gaussian N(lam, lam) replaces Poisson where lam >= GAUSS_MIN_COUNTS."""
    counts = lam + np.sqrt(lam) * rng.standard_normal(lam.shape)
    low = lam < GAUSS_MIN_COUNTS
    if low.any():
        counts[low] = rng.poisson(lam[low])
    return counts


def expose(
    t_eff: np.ndarray,
    acq: Acquisition,
    rng: np.random.Generator,
    engine: str = "numpy",
    noise: bool = True,
) -> np.ndarray:
    """The normalised detector image (float32, [0, 1]) of an effective thickness map.

    ``engine`` "numpy" runs the float64 reference (``expose_numpy``), "fast" the float32 pass
    (``expose_fast``); same model, same noise distribution, different noise values.
    """
    field = background(acq["background"], t_eff.shape[0], rng)
    if engine == "fast":
        return expose_fast(t_eff, field, acq, rng, noise)
    return expose_numpy(t_eff, field, acq, rng, noise)


def expose_fast(
    t_eff: np.ndarray, field: np.ndarray, acq: Acquisition, rng: np.random.Generator, noise: bool = True
) -> np.ndarray:
    """The exposure pass in float32: numpy's SIMD ``exp``, then one fused compiled pass.

    Above ``GAUSS_MIN_COUNTS`` photon and read noise are independent Gaussians, so their sum is
    drawn at once: ``gain * lam + sqrt(gain^2 lam + read^2) * z`` (the same distribution as the
    reference's two draws), ``z`` from ``synthetic._kernels.normal_table``. Below it, Poisson
    counts plus read noise, as in the reference.
    """
    from synthetic._kernels import (  # deferred: numba, for the fast engine only
        expose_kernel,
        gaussian_weights,
        normal_table,
    )

    f32 = np.float32
    t = t_eff.astype(f32)
    denom = t * f32(acq["beam_hardening"])
    denom += f32(1)
    t *= f32(-acq["mu"])
    t /= denom
    e = np.exp(t, out=t)  # exp(-A(t))
    out, lam = np.empty_like(e), np.empty_like(e)
    raw = rng.bit_generator.random_raw((out.size + 1) // 2) if noise else np.empty(0, np.uint64)
    scale = 1.0 / (FULL_SCALE * acq["dose"])
    settings = np.array(
        [acq["scatter"], acq["dose"], acq["gain"], acq["offset"], acq["read_noise"], scale, GAUSS_MIN_COUNTS],
        np.float32,
    )
    low = expose_kernel(e, field, gaussian_weights(acq["blur"]), raw, normal_table(), settings, out, lam)
    if noise and low:
        _poisson_low(out, lam, acq, rng, f32(scale))
    return out


def _poisson_low(
    out: np.ndarray, lam: np.ndarray, acq: Acquisition, rng: np.random.Generator, scale: np.float32
) -> None:
    """Redraw the pixels below GAUSS_MIN_COUNTS with Poisson counts plus read noise."""
    f32 = np.float32
    low = lam < f32(GAUSS_MIN_COUNTS)
    counts = rng.poisson(lam[low]).astype(f32)
    reading = f32(acq["gain"]) * counts + f32(acq["offset"] * acq["dose"])
    reading += f32(acq["read_noise"]) * rng.standard_normal(counts.shape, dtype=f32)
    out[low] = np.clip(reading * scale, f32(0), f32(1))


def expose_numpy(
    t_eff: np.ndarray, field: np.ndarray, acq: Acquisition, rng: np.random.Generator, noise: bool = True
) -> np.ndarray:
    """The numpy reference of the exposure pass (see the module docstring)."""
    from scipy.ndimage import gaussian_filter  # here, not at the top: a 0.3 s import the fast engine skips

    transmission = field * (np.exp(-attenuation(t_eff, acq["mu"], acq["beam_hardening"])) + acq["scatter"])
    if acq["blur"] > 0:
        transmission = gaussian_filter(transmission, acq["blur"], mode="nearest", truncate=3.0)
    dose = acq["dose"]
    counts = photon_counts(dose * transmission, rng) if noise else dose * transmission
    reading = acq["gain"] * counts + acq["offset"] * dose
    if noise:
        reading = reading + acq["read_noise"] * rng.standard_normal(counts.shape)
    return np.clip(reading / (FULL_SCALE * dose), 0.0, 1.0).astype(np.float32)


def noise_sigma(intensity: float, acq: Acquisition) -> float:
    """Noise std of the normalised reading at a noise-free transmission ``intensity``."""
    dose = acq["dose"]
    var = acq["gain"] ** 2 * dose * intensity + acq["read_noise"] ** 2
    return float(np.sqrt(var) / (FULL_SCALE * dose))
