"""One sweep arm, validated then run in a control session (``segfactory sweep`` and ``compare``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.run_policy import load_run_defaults
from agents.space import SEARCH_SPACE, load_space
from controls.session import control_session
from controls.sweep import SweepSummary, check_sweep, run_sweep, storage_url
from segfactory.errors import HomeError
from segfactory.home import SOURCE_ROOT, Home

HomeOpener = Callable[[Path | None, str], Home]  # (home, profile) -> the home, ready to use


def existing_home(home: Path | None, profile: str) -> Home:
    """The home, which must exist: creating one is ``init``'s, and the CLI does it before a control runs."""
    resolved = Home.resolve(home)
    if not resolved.exists():
        raise HomeError(f"no home at {resolved.root} for the {profile} profile; run `segfactory init` first")
    return resolved


def home_profile(home: Path | None, asked: str) -> str:
    """An existing home keeps the profile it was created with; a new one gets ``asked``."""
    resolved = Home.resolve(home)
    return str(resolved.info().get("profile", asked)) if resolved.exists() else asked


def run_sweep_arm(
    home: Path | None,
    *,
    sampler: str,
    budget_s: float,
    seed: int,
    storage: str | None,
    space_path: Path | None,
    profile: str,
    backend: str,
    run_id: str,
    max_trials: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
    on_home: Callable[[Any], None] = lambda home: None,
    open_home: HomeOpener = existing_home,
) -> SweepSummary:
    """Validate everything (nothing is created on bad input), then run one sweep; returns its summary.
    ``open_home`` gives the home once everything is valid (the CLI's creates a missing one); ``on_home``
    is called with it before the sweep starts (the CLI's drop)."""
    import yaml

    profile = home_profile(home, profile)
    defaults = load_run_defaults(profile)
    base = yaml.safe_load((SOURCE_ROOT / defaults.base_config).read_text())
    plan = check_sweep(
        sampler,
        budget_s,
        seed,
        storage_url(Home.resolve(home).root, storage),
        load_space(space_path or SEARCH_SPACE),
        base,
        defaults.ticket,
    )
    resolved = open_home(home, profile)
    on_home(resolved)
    with control_session(
        resolved, backend=backend, profile=profile, run_id=run_id, kind="sweep", progress=progress
    ) as s:
        result = run_sweep(
            plan,
            s.services,
            s.judge,
            run_id=run_id,
            make_seed=s.make_seed,
            people=resolved.people_dir(run_id),
            max_trials=max_trials,
            progress=progress,
        )
    summary = result.summary().model_copy(
        update={"sampler": sampler, "seed": seed, "budget_s": budget_s, "storage": plan.storage}
    )
    people = resolved.people_dir(run_id)
    people.mkdir(parents=True, exist_ok=True)
    (people / "sweep.json").write_text(json.dumps(summary.as_json(), indent=2, sort_keys=True))
    return summary


__all__ = ["HomeOpener", "existing_home", "home_profile", "run_sweep_arm"]
