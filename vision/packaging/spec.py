"""What a packaging step is asked to do (``PackageSpec``) and its limits: no onnx imported here.

The runner validates a packaging ticket's change with this on the host and sets the host-owned
keys itself (``HOST_KEYS``); ``vision.packaging.build`` does the work in the sandbox.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from segfactory.errors import DataError
from vision.holdout import CARVE_FRACTION, CARVE_SEED

MAX_MEMBERS = 8  # models in one ensemble; past this: refused
MAX_MIN_SIZE = 12  # largest minimum component size offered; (2m - 1)^2 window offsets in the graph
MAX_PACKAGE_BYTES = 256 * 1024**2  # the gate's MAX_MODEL_BYTES; past it: PackageRefused, nothing written
MIN_CHOICE_IMAGES = 8  # carved images needed to choose a threshold; fewer: PackageRefused
HOST_KEYS = ("gate_threshold", "holdout_fraction", "holdout_seed")  # set by the host, never by a ticket


class PackageRefused(DataError):
    """The members cannot make one ensemble (or the data cannot choose its post-processing)."""


class PackageSpec(BaseModel):
    """How to package: views, the grid to choose from, and (host-owned) what the gate and the
    members' training fixed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flips: list[Literal["h", "v", "hv"]] = ["h"]  # views besides the image itself; each costs a pass
    thresholds: list[float] = Field(default_factory=lambda: [round(0.3 + 0.05 * i, 2) for i in range(9)])
    min_sizes: list[int] = [1, 2, 3]  # 1: no size filter; each m costs (2m - 1)^2 window offsets
    max_slice_drop: float = Field(default=0.02, ge=0, le=1)  # worst void-size recall it may lose
    gate_threshold: float = Field(default=0.5, gt=0, lt=1)  # the win rule's threshold (host)
    holdout_fraction: float = Field(default=CARVE_FRACTION, gt=0, le=0.5)  # the members' carve (host)
    holdout_seed: int = Field(default=CARVE_SEED, ge=0)

    @field_validator("flips")
    @classmethod
    def _unique_flips(cls, flips: list[str]) -> list[str]:
        if len(set(flips)) != len(flips):
            raise ValueError(f"flips repeat a view: {flips}")
        return flips

    @field_validator("thresholds")
    @classmethod
    def _probabilities(cls, values: list[float]) -> list[float]:
        if not values or any(not 0 < v < 1 for v in values):
            raise ValueError(f"thresholds must be a non-empty list in (0, 1); got {values}")
        return values

    @field_validator("min_sizes")
    @classmethod
    def _sizes(cls, values: list[int]) -> list[int]:
        if not values or any(not 1 <= v <= MAX_MIN_SIZE for v in values):
            raise ValueError(f"min_sizes must be a non-empty list in 1..{MAX_MIN_SIZE}; got {values}")
        return values


__all__ = [
    "HOST_KEYS",
    "MAX_MEMBERS",
    "MAX_MIN_SIZE",
    "MAX_PACKAGE_BYTES",
    "MIN_CHOICE_IMAGES",
    "PackageRefused",
    "PackageSpec",
]
