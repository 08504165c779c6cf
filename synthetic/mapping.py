"""How imported detector values become the [0, 1] intensities every model reads.

Detectors write 8-bit, 12-bit, 14-bit or 16-bit counts, mostly in 16-bit containers (a 12-bit
flat panel writes values up to 4,095 into a 16-bit PNG). Dividing by the container's maximum
turns such a set into intensities of a few hundredths, far outside anything a model was trained
on, so the mapping is an explicit choice, recorded in the split's manifest (``intensity_mapping``):

- ``bit-depth`` (the default): ``x / (2**N - 1)``. ``N`` is ``--bit-depth N``, else what the
  files declare (PNG ``sBIT``, TIFF ``BitsPerSample``, DICOM ``BitsStored``), else the smallest
  of ``CANDIDATE_DEPTHS`` that holds the largest value; 8-bit files are always 8-bit.
- ``window``: ``clip((x - LOW) / (HIGH - LOW), 0, 1)`` for ``--window LOW:HIGH``.
- ``percentile``: a window from the whole set's pooled ``--percentile P_LOW:P_HIGH`` values
  (computed once per import, so every image, and both parts of a real import, share it).

``mapping_warnings`` names the numbers and the flag when values use less than
``LOW_USE_FRACTION`` of the declared range or the mapping saturates.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from segfactory.errors import DataError, UsageError

CANDIDATE_DEPTHS = (8, 10, 12, 14, 16)  # detector bit depths the data-based detection picks from
LOW_USE_FRACTION = 1 / 16  # values spanning less than this share of the declared range: a warning
SATURATION_FRACTION = 0.01  # more than this share of pixels at an end of the mapped range: a warning
MAX_PERCENTILE_SAMPLE = 4_000_000  # pooled pixels the percentile window is computed from (evenly strided)
MappingMode = Literal["bit-depth", "window", "percentile"]


class MappingRequest(BaseModel):
    """What the user asked for; at most one of the three is set (none: detect the bit depth)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bit_depth: int | None = None
    window: tuple[float, float] | None = None
    percentile: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _one_at_most(self) -> MappingRequest:
        given = [name for name in ("bit_depth", "window", "percentile") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(
                f"choose one intensity mapping; got {', '.join('--' + g.replace('_', '-') for g in given)}"
            )
        if self.bit_depth is not None and not 1 <= self.bit_depth <= 16:
            raise ValueError(f"--bit-depth must be 1..16; got {self.bit_depth}")
        if self.window is not None and not 0 <= self.window[0] < self.window[1]:
            raise ValueError(
                f"--window LOW:HIGH needs 0 <= LOW < HIGH; got {self.window[0]:g}:{self.window[1]:g}"
            )
        if self.percentile is not None and not 0 <= self.percentile[0] < self.percentile[1] <= 100:
            raise ValueError(
                f"--percentile P_LOW:P_HIGH needs 0 <= P_LOW < P_HIGH <= 100; got "
                f"{self.percentile[0]:g}:{self.percentile[1]:g}"
            )
        return self

    @classmethod
    def from_flags(cls, bit_depth: int | None, window: str | None, percentile: str | None) -> MappingRequest:
        """Parse the CLI flags; UsageError with the flag named when one is malformed."""
        try:
            return cls(
                bit_depth=bit_depth,
                window=_pair("--window", window),
                percentile=_pair("--percentile", percentile),
            )
        except ValueError as exc:
            errors = getattr(exc, "errors", None)
            message = errors()[0]["msg"].removeprefix("Value error, ") if callable(errors) else str(exc)
            raise UsageError(message) from None


def _pair(flag: str, text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    parts = text.split(":")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise UsageError(f"{flag} takes LOW:HIGH (two numbers), e.g. {flag} 400:3300; got {text!r}") from None
    return low, high


class IntensityMapping(BaseModel):
    """The mapping an import applied, as recorded in the manifest; ``apply`` repeats it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: MappingMode
    bit_depth: int  # the source bit depth of the 16-bit (or only) container group, as recorded
    detected_from: str  # "--bit-depth", "png sBIT", "data maximum", ... (where the bit depth came from)
    windows: dict[str, tuple[float, float]]  # container bits ("8", "16") -> raw values mapped to 0 and 1
    raw_range: dict[str, tuple[int, int]]  # container bits -> smallest and largest raw value in the set
    percentiles: tuple[float, float] | None = None
    formula: str = "clip((x - low) / (high - low), 0, 1), low and high from windows[container bits]"

    def depth_of(self, container_bits: int) -> int:
        """The source bit depth recorded for an image in a container of ``container_bits``."""
        if self.mode != "bit-depth":
            return self.bit_depth
        return int(round(np.log2(self.windows[str(container_bits)][1] + 1)))

    def apply(self, pixels: np.ndarray) -> np.ndarray:
        """Raw pixels (uint8 or uint16) -> float32 in [0, 1] by this mapping."""
        low, high = self.windows[str(8 * pixels.dtype.itemsize)]
        unit = (pixels.astype(np.float32) - np.float32(low)) / np.float32(high - low)
        return np.clip(unit, 0.0, 1.0).astype(np.float32)


def _groups(images: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Container bits -> indices of the images in that container."""
    bits = np.array([8 * im.dtype.itemsize for im in images])
    return {int(b): np.flatnonzero(bits == b) for b in np.unique(bits)}


def needed_depth(max_value: int) -> int:
    """The smallest candidate bit depth that holds ``max_value``."""
    return next((d for d in CANDIDATE_DEPTHS if max_value <= 2**d - 1), 16)


def _source_depth(
    images: list[np.ndarray], declared: list[int | None], request: MappingRequest, wide: int, raw_max: int
) -> tuple[int, str]:
    if request.bit_depth is not None:
        return request.bit_depth, "--bit-depth"
    if wide == 8:
        return 8, "8-bit files"
    stated = [d for d, im in zip(declared, images, strict=True) if d is not None and im.dtype == np.uint16]
    if stated and raw_max <= 2 ** max(stated) - 1:
        return max(stated), "the files' own declaration (PNG sBIT / TIFF BitsPerSample / DICOM BitsStored)"
    need = needed_depth(raw_max)
    if stated:
        return need, f"data maximum {raw_max} (the files declare {max(stated)} bits, which cannot hold it)"
    return need, f"data maximum {raw_max}"


def resolve_mapping(
    images: list[np.ndarray], declared: list[int | None], request: MappingRequest
) -> IntensityMapping:
    """The mapping for a whole set of raw images (uint8/uint16), per ``request``; DataError if impossible."""
    if not images:
        raise DataError("no images to map")
    groups = _groups(images)
    raw_range = {
        str(b): (int(min(images[i].min() for i in idx)), int(max(images[i].max() for i in idx)))
        for b, idx in groups.items()
    }
    wide = max(groups)
    depth, source = _source_depth(images, declared, request, wide, raw_range[str(wide)][1])
    if request.bit_depth is not None and 8 in groups and request.bit_depth > 8:
        raise DataError(
            f"--bit-depth {request.bit_depth} cannot apply to the set's 8-bit files "
            f"({len(groups[8])} of them); import them separately, or drop --bit-depth"
        )
    if request.window is None and request.percentile is None:
        windows = {str(b): (0.0, float(2 ** (depth if b == wide else 8) - 1)) for b in groups}
        if request.bit_depth is not None:
            windows = {str(b): (0.0, float(2**depth - 1)) for b in groups}
        return IntensityMapping(
            mode="bit-depth", bit_depth=depth, detected_from=source, windows=windows, raw_range=raw_range
        )
    if len(groups) > 1:
        raise DataError(
            "the set mixes 8-bit and 16-bit files; a --window or --percentile mapping works on raw "
            "values and needs one kind of file: convert them to one bit depth, or use --bit-depth"
        )
    if request.window is not None:
        return IntensityMapping(
            mode="window",
            bit_depth=depth,
            detected_from=source,
            windows={str(wide): request.window},
            raw_range=raw_range,
        )
    assert request.percentile is not None
    low, high = _pooled_percentiles(images, request.percentile)
    if not high > low:
        raise DataError(
            f"--percentile {request.percentile[0]:g}:{request.percentile[1]:g} gives an empty window "
            f"({low:g}:{high:g}); the images are nearly constant, choose wider percentiles or --window"
        )
    return IntensityMapping(
        mode="percentile",
        bit_depth=depth,
        detected_from=source,
        windows={str(wide): (low, high)},
        raw_range=raw_range,
        percentiles=request.percentile,
    )


def _pooled_percentiles(images: list[np.ndarray], percentiles: tuple[float, float]) -> tuple[float, float]:
    total = sum(im.size for im in images)
    step = max(1, total // MAX_PERCENTILE_SAMPLE)
    pooled = np.concatenate([im.ravel() for im in images])[::step]
    low, high = np.percentile(pooled, percentiles)
    return float(low), float(high)


def _describe(mapping: IntensityMapping, bits: str) -> str:
    if mapping.mode == "bit-depth":
        return f"the {mapping.depth_of(int(bits))}-bit range"
    if mapping.mode == "window":
        return "the --window"
    assert mapping.percentiles is not None
    return f"the --percentile {mapping.percentiles[0]:g}:{mapping.percentiles[1]:g} window"


def _use_warning(mapping: IntensityMapping, bits: str, mapped: tuple[float, float]) -> str | None:
    (low, high), (vmin, vmax) = mapping.windows[bits], mapping.raw_range[bits]
    used = (min(vmax, high) - max(vmin, low)) / (high - low)
    if used >= LOW_USE_FRACTION:
        return None
    fix = f"--window {vmin}:{vmax} or --percentile 0.5:99.5"
    if mapping.mode == "bit-depth" and needed_depth(vmax) < mapping.bit_depth:
        fix = f"--bit-depth {needed_depth(vmax)} (or {fix})"
    return (
        f"values {vmin}..{vmax} use {max(used, 0.0):.1%} of {_describe(mapping, bits)} {low:g}..{high:g}, "
        f"less than 1/16, so the images come out at {mapped[0]:.4f}..{mapped[1]:.4f} where models expect "
        f"about 0.05..1; pass {fix}"
    )


def _saturation_warnings(mapping: IntensityMapping, bits: str, raw: np.ndarray) -> list[str]:
    (low, high), vmax = mapping.windows[bits], mapping.raw_range[bits][1]
    out = []
    above = int((raw > high).sum())
    if mapping.mode == "bit-depth" and above:
        out.append(
            f"{above} pixels ({above / raw.size:.2%}) lie above {high:g}, the top of the declared "
            f"{mapping.depth_of(int(bits))}-bit range, and were clipped to 1.0; "
            f"pass --bit-depth {needed_depth(vmax)} or a --window that reaches {vmax}"
        )
    expect = (
        (0.0, 0.0)
        if mapping.percentiles is None
        else (mapping.percentiles[0] / 100, 1 - mapping.percentiles[1] / 100)
    )
    for end, share, value, flag in (
        ("top", float((raw >= high).mean()), high, expect[1]),
        ("bottom", float((raw <= low).mean()), low, expect[0]),
    ):
        if share > flag + SATURATION_FRACTION:
            out.append(
                f"{share:.1%} of pixels sit at the {end} of the mapping ({value:g} -> "
                f"{1 if end == 'top' else 0}) and read as saturated; if the detector did not saturate, "
                f"widen the mapping (--window LOW:HIGH around {mapping.raw_range[bits][0]}:{vmax}, "
                f"or --percentile 0.5:99.5)"
            )
    return out


def mapping_warnings(mapping: IntensityMapping, images: list[np.ndarray]) -> list[str]:
    """Warnings (numbers and the flag that fixes it) for a low-use or saturating mapping."""
    out = []
    for bits, idx in _groups(images).items():
        key = str(bits)
        raw = np.concatenate([images[i].ravel() for i in idx])
        low, high = mapping.windows[key]
        mapped = (
            max(0.0, (mapping.raw_range[key][0] - low) / (high - low)),
            min(1.0, (mapping.raw_range[key][1] - low) / (high - low)),
        )
        use = _use_warning(mapping, key, mapped)
        out += ([use] if use else []) + _saturation_warnings(mapping, key, raw)
    return out
