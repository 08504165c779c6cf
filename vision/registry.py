"""The model registry: preset names and shapes (no torch import, so configs validate fast)."""

from __future__ import annotations

from dataclasses import dataclass

from segfactory.errors import UsageError


@dataclass(frozen=True)
class Preset:
    """A named encoder and decoder shape."""

    encoder: str  # timm model name
    out_indices: tuple[int, ...]  # which encoder stages feed the decoder (shallow to deep)
    decoder_width: int  # channels in every decoder block (overridable per config)


PRESETS: dict[str, Preset] = {
    # The reference preset for every benchmark ratio: a thin MobileNetV3 trains fast on CPU at 64x64.
    "unet-mobilenetv3": Preset("mobilenetv3_small_050", (0, 1, 2, 3), 16),
    "unet-resnet10t": Preset("resnet10t", (0, 1, 2, 3), 32),
    "unet-efficientnet_b0": Preset("efficientnet_b0", (0, 1, 2, 3), 32),
}
REFERENCE_PRESET = "unet-mobilenetv3"
CLASSICAL = "baseline-classical"
# nnU-Net's plain-convolution U-Net (vision.plain_unet), its depth sized from the training patch;
# ``decoder_width`` is its first stage's width (default 32, nnU-Net's).
PLAIN_UNET = "unet-plain"
PLAIN_BASE_WIDTH = 32


def known_models() -> list[str]:
    return sorted([*PRESETS, CLASSICAL, PLAIN_UNET])


def check_model_name(name: str) -> str:
    """``name`` if registered; otherwise a UsageError listing the known ones."""
    if name not in PRESETS and name not in (CLASSICAL, PLAIN_UNET):
        raise UsageError(f"model {name!r} is not registered; known: {', '.join(known_models())}")
    return name


def get_preset(name: str) -> Preset:
    """The named preset; an unknown name lists the known ones."""
    check_model_name(name)
    if name in (CLASSICAL, PLAIN_UNET):
        raise UsageError(f"{name} is not a timm-encoder preset; build it with vision.models.build_model")
    return PRESETS[name]
