"""``policies/budgets.yaml``: the caps on one ticket, one run and one compare arm, per profile.

One schema for every reader: the runner refuses a ticket over its profile's ``ticket`` caps
before anything starts (``runner._policy``), the agents' validation and the run loop read the
``run`` and ``compare_arm`` caps (``agents.validate``, ``agents.run``). An invalid file is a
``PolicyError`` that names it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from segfactory.errors import PolicyError
from segfactory.home import SOURCE_ROOT

BUDGETS_POLICY = SOURCE_ROOT / "policies" / "budgets.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TicketCaps(_Strict):
    """The most one ticket may ask for."""

    max_device_seconds: float = Field(gt=0)
    max_epochs: int = Field(ge=1)


class RunCaps(_Strict):
    wall_seconds: float = Field(gt=0)
    device_seconds: float = Field(gt=0)
    tickets: int = Field(ge=1)
    llm_tokens: int = Field(ge=0)


class ProfileBudgets(_Strict):
    ticket: TicketCaps
    run: RunCaps
    compare_arm: RunCaps | None = None  # one agent arm-run of ``compare``; absent: the run caps

    def arm_caps(self) -> RunCaps:
        return self.compare_arm or self.run


class BudgetPolicy(_Strict):
    """``policies/budgets.yaml``, validated."""

    schema_version: Literal[1]
    profiles: dict[str, ProfileBudgets]
    config_keys_fallback: tuple[str, ...]
    code_root: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")

    def for_profile(self, profile: str) -> ProfileBudgets:
        if profile not in self.profiles:
            raise PolicyError(
                f"budgets.yaml has no profile {profile!r}; known: {', '.join(sorted(self.profiles))}"
            )
        return self.profiles[profile]


@lru_cache(maxsize=4)
def load_budget_policy(path: Path = BUDGETS_POLICY) -> BudgetPolicy:
    """Load and validate the budget policy; an invalid file is a ``PolicyError``."""
    try:
        return BudgetPolicy.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise PolicyError(f"invalid budget policy {path}: {exc}; fix the file and retry") from exc


def ticket_caps(profile: str, path: Path = BUDGETS_POLICY) -> TicketCaps:
    """The ``ticket`` caps of ``profile``."""
    return load_budget_policy(path).for_profile(profile).ticket


__all__ = [
    "BUDGETS_POLICY",
    "BudgetPolicy",
    "ProfileBudgets",
    "RunCaps",
    "TicketCaps",
    "load_budget_policy",
    "ticket_caps",
]
