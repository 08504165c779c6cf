"""Generator parameters: what `--param KEY=VALUE` can change, with validated ranges.

Units: sizes in pixels, thicknesses in millimetres, dose in photons per pixel of open beam,
``mu`` in 1/mm. Contrast is the Michelson contrast ``(I_void - I_wall) / (I_void + I_wall)`` of
the noise-free transmission at a void's deepest point; it follows from the void's depth against
the local wall thickness (a target contrast sets the depth, and a void can never be deeper than
``MAX_DEPTH_FRACTION`` of the wall, so thin walls cap the contrast).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from segfactory.errors import UsageError

BACKGROUNDS = ("flat", "gradient", "vignette", "texture")
PART_SOURCES = ("procedural", "fashion-mnist")
MAX_DEPTH_FRACTION = 0.8  # a void spans at most this fraction of the local wall thickness
MAX_IMAGE_SIZE = 2048  # pixels per side; past this generation is refused (memory)
MAX_N = 1_000_000  # images per command; past this generation is refused

PartSource = Literal["procedural", "fashion-mnist"]


class GenParams(BaseModel):
    """Every knob of the generator; defaults give a varied, moderately hard data set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    part_source: PartSource = "procedural"  # procedural contours, or Fashion-MNIST silhouettes
    idx_path: str | None = None  # Fashion-MNIST IDX images file (needed for that part source)
    void_prob: float = Field(0.75, ge=0.0, le=1.0)  # chance that an image holds any void
    count_min: int = Field(1, ge=1, le=64)  # voids (pores, cavities or clusters) per image
    count_max: int = Field(4, ge=1, le=64)
    diameter_min: float = Field(2.0, gt=0.0)  # pore diameter range, pixels
    diameter_max: float = Field(10.0, gt=0.0)
    contrast_min: float = Field(0.05, gt=0.0, lt=1.0)  # target Michelson contrast range
    contrast_max: float = Field(0.40, gt=0.0, lt=1.0)
    shrinkage_prob: float = Field(0.2, ge=0.0, le=1.0)  # chance a void is a shrinkage cavity
    cluster_prob: float = Field(0.15, ge=0.0, le=1.0)  # chance a void is a pore cluster
    thickness_min: float = Field(6.0, gt=0.0)  # nominal wall thickness range, mm
    thickness_max: float = Field(24.0, gt=0.0)
    mu: float = Field(0.08, gt=0.0, le=5.0)  # linear attenuation coefficient, 1/mm
    beam_hardening: float = Field(0.01, ge=0.0, le=1.0)  # mu_eff = mu / (1 + bh * t); 0 = off
    dose_min: float = Field(300.0, gt=0.0)  # open-beam photons per pixel
    dose_max: float = Field(4000.0, gt=0.0)
    blur_min: float = Field(0.4, ge=0.0, le=10.0)  # Gaussian PSF sigma range, pixels
    blur_max: float = Field(1.2, ge=0.0, le=10.0)
    read_noise: float = Field(3.0, ge=0.0)  # detector read noise, counts (std)
    backgrounds: tuple[str, ...] = BACKGROUNDS  # background types drawn from, uniformly

    @model_validator(mode="after")
    def _ranges(self) -> GenParams:
        for low, high in (
            ("count_min", "count_max"),
            ("diameter_min", "diameter_max"),
            ("contrast_min", "contrast_max"),
            ("thickness_min", "thickness_max"),
            ("dose_min", "dose_max"),
            ("blur_min", "blur_max"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{low}={getattr(self, low)} is above {high}={getattr(self, high)}")
        unknown = [b for b in self.backgrounds if b not in BACKGROUNDS]
        if unknown or not self.backgrounds:
            raise ValueError(
                f"backgrounds {list(self.backgrounds)} invalid; choose from {', '.join(BACKGROUNDS)}"
            )
        if self.part_source == "fashion-mnist" and not self.idx_path:
            raise ValueError("part_source fashion-mnist needs the IDX images file (--idx PATH)")
        return self


def _field_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "params"
        parts.append(f"{where}: {err['msg']} (got {err.get('input')!r})" if err["loc"] else err["msg"])
    return "; ".join(parts)


def make_params(**values: Any) -> GenParams:
    """GenParams from keyword values; a bad value raises UsageError naming it."""
    if "part_source" in values and values["part_source"] not in PART_SOURCES:
        raise UsageError(f"unknown part source {values['part_source']!r}; known: {', '.join(PART_SOURCES)}")
    try:
        return GenParams(**values)
    except ValidationError as exc:
        raise UsageError(f"invalid generator parameters: {_field_error(exc)}") from None


class ParamValues(TypedDict, total=False):
    """``GenParams``' fields by name, any of them, as ``make_params(**values)`` takes them (before
    validation): a set of overrides such as a slice constraint's."""

    part_source: PartSource
    idx_path: str | None
    void_prob: float
    count_min: int
    count_max: int
    diameter_min: float
    diameter_max: float
    contrast_min: float
    contrast_max: float
    shrinkage_prob: float
    cluster_prob: float
    thickness_min: float
    thickness_max: float
    mu: float
    beam_hardening: float
    dose_min: float
    dose_max: float
    blur_min: float
    blur_max: float
    read_noise: float
    backgrounds: tuple[str, ...]


def parse_param_args(pairs: list[str]) -> dict[str, str | tuple[str, ...]]:
    """``["contrast_min=0.1", "backgrounds=flat,gradient"]`` -> a dict for make_params (values as
    typed, strings; ``backgrounds`` split into a tuple)."""
    out: dict[str, str | tuple[str, ...]] = {}
    fields = GenParams.model_fields
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--param {pair!r}: expected KEY=VALUE, e.g. contrast_min=0.1")
        if key not in fields:
            raise UsageError(
                f"--param {key!r} is not a generator parameter; known: {', '.join(sorted(fields))}"
            )
        out[key] = tuple(v.strip() for v in value.split(",") if v.strip()) if key == "backgrounds" else value
    return out
