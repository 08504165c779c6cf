"""Profiles size a home.

``demo`` is sized so that a whole run fits in 15 minutes on 2 CPU cores (set-up excluded);
``default`` is the overnight profile with a 10,000-image sealed tier.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from segfactory.errors import UsageError

ProfileName = Literal["demo", "default"]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    image_size: int = Field(gt=0)  # pixels per side of every generated image
    n_train: int = Field(gt=0)
    n_dev: int = Field(gt=0)
    tiers: dict[str, int]  # held-back tier name -> images per version


PROFILES: dict[str, Profile] = {
    "demo": Profile(
        name="demo",
        image_size=64,
        n_train=768,
        n_dev=256,
        tiers={"confirm-a": 400, "confirm-b": 400, "sealed": 1000, "never-queried": 400},
    ),
    "default": Profile(
        name="default",
        image_size=96,
        n_train=6000,
        n_dev=1500,
        tiers={"confirm-a": 2000, "confirm-b": 2000, "sealed": 10000, "never-queried": 2000},
    ),
}


def get_profile(name: str) -> Profile:
    """The named profile; an unknown name lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise UsageError(f"profile {name!r} is not defined; known: {known}") from None
