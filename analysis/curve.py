"""Learning curve: dev dice after training on 25 %, 50 % and 100 % of the training images.

Runs any ``Trainer`` (see ``analysis.planted``); the result feeds the ``more-real-data`` rule
(dice still rising from 50 % to 100 % means more data of the same kind should help).
"""

from __future__ import annotations

import numpy as np

from analysis.errortypes import analyse_errors
from analysis.planted import Trainer
from analysis.report import SplitLike

FRACTIONS = (0.25, 0.5, 1.0)  # shares of the training images


def learning_curve(
    trainer: Trainer,
    train: SplitLike,
    dev: SplitLike,
    *,
    seed: int = 0,
    fractions: tuple[float, ...] = FRACTIONS,
    threshold: float = 0.5,
) -> dict[str, float]:
    """``{"0.25": dice, "0.5": dice, "1.0": dice}``: mean dev dice per training share (nested subsets)."""
    order = np.random.default_rng(seed).permutation(train.images.shape[0])
    curve = {}
    for share in fractions:
        take = np.sort(order[: max(1, round(share * order.size))])
        model = trainer.fit(train.images[take], train.masks[take], seed=seed)
        dice = analyse_errors(model.predict(dev.images), dev.masks, threshold=threshold).per_image["dice"]
        curve[str(share)] = float(dice.mean())
    return curve
