"""Named training recipes: config patches (dotted keys) a ticket, a profile or the sweep can apply.

``nnunet-recipe`` is nnU-Net's 2D recipe in the factory's own trainer, as far as its config
can express it, so that config tickets and the sweep can move towards it and beyond:

- a plain-convolution U-Net sized from the data (``unet-plain``: stages from the patch, widths
  32 doubling to 512, instance norm, leaky ReLU) with deep supervision;
- Dice + cross-entropy (binary: ``bce`` + ``dice``, weight 1 each);
- SGD, Nesterov momentum 0.99, lr 0.01, weight decay 3e-5, the poly schedule (1 - t)^0.9;
- a third of patches centred on foreground (nnU-Net's ``oversample_foreground_percent`` 0.33);
- its augmentation set where ``vision.augment`` has the transform: mirroring (and 90-degree
  rotations), scaling 0.7-1.4, multiplicative brightness 0.75-1.25, gamma 0.7-1.5, Gaussian
  noise, Gaussian blur sigma 0.5-1.0. Not expressible here: rotation by arbitrary angles,
  contrast, and simulated low resolution. Noise is in image units (nnU-Net's is after z-score):
  0-0.02, the edge of the range the win rule's perturbations probe.

Epochs and batch stay the ticket's: nnU-Net's 1000 epochs of 250 iterations do not fit a demo
budget, and the factory's budget decides how long a ticket trains.
"""

from __future__ import annotations

from pydantic import JsonValue

from segfactory.errors import UsageError

NNUNET_RECIPE = "nnunet-recipe"

RECIPES: dict[str, dict[str, JsonValue]] = {
    NNUNET_RECIPE: {
        "model": {"name": "unet-plain", "decoder_width": 32, "stages": None},
        "deep_supervision": True,
        "loss": [{"name": "bce", "weight": 1.0}, {"name": "dice", "weight": 1.0}],
        "optim": {"name": "sgd", "lr": 0.01, "momentum": 0.99, "nesterov": True, "weight_decay": 3e-5},
        "schedule": {"name": "poly", "warmup_epochs": 0},
        "sampling.defect_centred_p": 0.33,
        "augment": {
            "p": 0.5,
            "flip": True,
            "scale": {"low": 0.7, "high": 1.4},
            "gain": {"low": 0.75, "high": 1.25},
            "gamma": {"low": 0.7, "high": 1.5},
            "noise_std": {"low": 0.0, "high": 0.02},
            "blur_sigma": {"low": 0.5, "high": 1.0},
        },
    },
}


def recipe_patch(name: str) -> dict[str, JsonValue]:
    """The named recipe's config patch (a copy); an unknown name lists the known ones."""
    if name not in RECIPES:
        raise UsageError(f"recipe {name!r} is not registered; known: {', '.join(sorted(RECIPES))}")
    import copy

    return copy.deepcopy(RECIPES[name])


__all__ = ["NNUNET_RECIPE", "RECIPES", "recipe_patch"]
