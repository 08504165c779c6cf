"""Two-sample tests: MMD with a permutation p-value, and a classifier two-sample test (C2ST).

MMD uses a Gaussian kernel on standardised simple features (``_stats._features``) with the
median-distance bandwidth; the p-value is the share of ``MMD_PERMUTATIONS`` label
permutations whose biased MMD² reaches the observed one (add-one corrected). The C2ST trains
a small CNN to tell real from synthetic on a balanced, seeded split and reports held-out
accuracy with a Wilson interval: near 0.5 means the classifier cannot tell them apart.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from segfactory.records import Result
from segfactory.stats import Interval, wilson_interval

MMD_PERMUTATIONS = 200  # label permutations for the MMD p-value
MMD_MAX_PER_SIDE = 2000  # images per side in the kernel matrix (seeded subsample past this)
C2ST_MAX_PER_SIDE = 600  # images per side for the classifier (seeded subsample past this)
C2ST_STEPS = 150  # optimiser steps (batches drawn with replacement from the training part)
C2ST_BATCH = 32  # images per step
C2ST_THREADS = 1  # torch threads while it trains (more thrash on a shared small CPU)
C2ST_TRAIN_FRACTION = 0.7  # rest is held out for the accuracy
C2ST_SIDE_PX = 32  # images are area-resized to this side before the CNN


def _subsample(x: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    return x if len(x) <= cap else x[np.sort(rng.choice(len(x), cap, replace=False))]


class Mmd(Result):
    """The kernel two-sample test on per-image features: biased MMD² and its permutation p-value."""

    mmd2: float
    p_value: float
    permutations: int
    bandwidth: float
    n_synthetic: int
    n_real: int
    features: list[str]


class C2st(Result):
    """The classifier two-sample test: held-out accuracy of a CNN telling real from synthetic."""

    accuracy: Interval  # Wilson 95% interval
    n_train: int
    n_held_out: int
    steps: int
    batch: int
    train_seconds: float
    chance: float
    distinguishable: bool  # the interval lies above chance


def mmd_test(fx: np.ndarray, fy: np.ndarray, *, seed: int = 0, permutations: int = MMD_PERMUTATIONS) -> Mmd:
    """Biased MMD² between two feature sets, its permutation p-value and the bandwidth."""
    rng = np.random.default_rng(seed)
    fx, fy = _subsample(fx, MMD_MAX_PER_SIDE, rng), _subsample(fy, MMD_MAX_PER_SIDE, rng)
    z = np.vstack([fx, fy])
    z = (z - z.mean(axis=0)) / np.maximum(z.std(axis=0), 1e-12)
    sq = (z * z).sum(axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * z @ z.T, 0.0)
    pick = rng.choice(len(z), min(len(z), 1000), replace=False)
    bandwidth = float(np.sqrt(np.median(d2[np.ix_(pick, pick)][np.triu_indices(len(pick), 1)]) / 2) or 1.0)
    k = np.exp(-d2 / (2 * bandwidth**2))
    nx, ny = len(fx), len(fy)
    signs = np.concatenate([np.full(nx, 1.0 / nx), np.full(ny, -1.0 / ny)])
    table = np.column_stack([signs] + [rng.permutation(signs) for _ in range(permutations)])
    stats = np.einsum("ip,ip->p", table, k @ table)  # s^T K s per column
    observed = float(stats[0])
    p_value = float((1 + np.sum(stats[1:] >= observed)) / (permutations + 1))
    return Mmd(
        mmd2=observed,
        p_value=p_value,
        permutations=permutations,
        bandwidth=bandwidth,
        n_synthetic=nx,
        n_real=ny,
        features=[
            "mean",
            "std",
            "gradient",
            "void_fraction",
            "log_nps_band1",
            "log_nps_band2",
            "log_nps_band3",
            "log_nps_band4",
        ],
    )


def _resize(images: np.ndarray, side: int) -> np.ndarray:
    import torch

    t = torch.from_numpy(np.array(images, dtype=np.float32))[:, None]  # a writable copy
    return torch.nn.functional.adaptive_avg_pool2d(t, side).numpy() if t.shape[-1] != side else t.numpy()


def _cnn() -> Any:
    from torch import nn

    return nn.Sequential(  # (B, 1, 32, 32) -> logit
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 16 x 16
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8 x 8
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 1),
    )


def c2st(synthetic: np.ndarray, real: np.ndarray, *, seed: int = 0, steps: int = C2ST_STEPS) -> C2st:
    """Held-out accuracy of a small CNN telling real (1) from synthetic (0), Wilson 95% interval."""
    import torch

    rng = np.random.default_rng(seed)
    n = min(len(synthetic), len(real), C2ST_MAX_PER_SIDE)
    x = np.concatenate(
        [
            _resize(_subsample(synthetic, n, rng)[:n], C2ST_SIDE_PX),
            _resize(_subsample(real, n, rng)[:n], C2ST_SIDE_PX),
        ]
    )
    x = (x - x.mean()) / max(float(x.std()), 1e-6)  # one pooled scale: it keeps the two sets' differences
    y = np.concatenate([np.zeros(n), np.ones(n)]).astype(np.float32)
    order = rng.permutation(len(x))
    cut = int(len(x) * C2ST_TRAIN_FRACTION)
    train, held = order[:cut], order[cut:]
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(C2ST_THREADS)
    try:
        return _fit_and_score(x, y, train, held, rng, steps)
    finally:
        torch.set_num_threads(threads)


def _fit_and_score(
    x: np.ndarray, y: np.ndarray, train: np.ndarray, held: np.ndarray, rng: np.random.Generator, steps: int
) -> C2st:
    import torch

    model = _cnn()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    started = time.perf_counter()
    for _ in range(steps):
        batch = torch.from_numpy(rng.choice(train, C2ST_BATCH))
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xt[batch])[:, 0], yt[batch])
        loss.backward()
        opt.step()
    train_s = time.perf_counter() - started
    with torch.no_grad():
        pred = (model(xt[held])[:, 0] > 0).numpy()
    correct = int((pred == (y[held] > 0.5)).sum())
    interval = wilson_interval(correct, len(held))
    return C2st(
        accuracy=interval,
        n_train=int(len(train)),
        n_held_out=int(len(held)),
        steps=steps,
        batch=C2ST_BATCH,
        train_seconds=round(train_s, 3),
        chance=0.5,
        distinguishable=interval.low > 0.5,
    )
