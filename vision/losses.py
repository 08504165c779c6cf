"""Losses on logits: BCE, soft Dice, focal, Tversky, and weighted sums of them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vision.config import LossTerm

SMOOTH = 1.0  # additive smoothing of the soft-overlap losses (pixels)


def _soft_tversky(prob: torch.Tensor, target: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """1 - Tversky index over the whole batch; alpha = beta = 0.5 is soft Dice."""
    tp = (prob * target).sum()
    fp = (prob * (1 - target)).sum()
    fn = ((1 - prob) * target).sum()
    return 1 - (tp + SMOOTH) / (tp + alpha * fp + beta * fn + SMOOTH)


def _focal(logits: torch.Tensor, target: torch.Tensor, gamma: float) -> torch.Tensor:
    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = torch.exp(-bce)  # probability given to the true class
    return ((1 - p_t) ** gamma * bce).mean()


def term_loss(term: LossTerm, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """One loss term on float32 logits and {0, 1} targets of the same shape."""
    if term.name == "bce":
        return F.binary_cross_entropy_with_logits(logits, target)
    if term.name == "focal":
        return _focal(logits, target, term.focal_gamma)
    prob = torch.sigmoid(logits)
    if term.name == "dice":
        return _soft_tversky(prob, target, 0.5, 0.5)
    return _soft_tversky(prob, target, term.tversky_alpha, term.tversky_beta)


def combined_loss(terms: list[LossTerm], logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Weighted sum of the configured terms (computed in float32 even under autocast)."""
    logits = logits.float()
    total = torch.zeros((), device=logits.device)
    for term in terms:
        total = total + term.weight * term_loss(term, logits, target)
    return total
