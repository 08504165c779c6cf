"""One sweep arm, validated then run in a control session (``segfactory sweep`` and ``compare``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def home_profile(home: Path | None, asked: str) -> str:
    """An existing home keeps the profile it was created with; a new one gets ``asked``."""
    from segfactory.home import Home

    resolved = Home.resolve(home)
    return str(resolved.info().get("profile", asked)) if resolved.exists() else asked


def run_sweep_arm(home: Path | None, *, sampler: str, budget_s: float, seed: int, storage: str | None,
                  space_path: Path | None, profile: str, backend: str, run_id: str,
                  max_trials: int | None = None, progress: Callable[[str], None] = lambda line: None,
                  on_home: Callable[[Any], None] = lambda home: None) -> dict[str, Any]:
    """Validate everything (nothing is created on bad input), then run one sweep; returns its summary.
    ``on_home`` is called with the home once it exists, before the sweep starts (the CLI's drop)."""
    import yaml

    from agents.run import REPO, load_run_defaults
    from controls.session import control_session
    from controls.space import SEARCH_SPACE, load_space
    from controls.sweep import check_sweep, run_sweep, storage_url
    from segfactory.cli._common import home_for
    from segfactory.home import Home

    profile = home_profile(home, profile)
    defaults = load_run_defaults(profile)
    base = yaml.safe_load((REPO / defaults.base_config).read_text())
    plan = check_sweep(sampler, budget_s, seed, storage_url(Home.resolve(home).root, storage),
                       load_space(space_path or SEARCH_SPACE), base, defaults.ticket)
    resolved = home_for(home, create=True, profile=profile)
    on_home(resolved)
    with control_session(resolved, backend=backend, profile=profile, run_id=run_id, kind="sweep",
                         progress=progress) as s:
        result = run_sweep(plan, s.services, s.judge, run_id=run_id, make_seed=s.make_seed,
                           people=resolved.people_dir(run_id), max_trials=max_trials, progress=progress)
    summary = {**result.summary(), "sampler": sampler, "seed": seed, "budget_s": budget_s, "storage": plan.storage}
    people = resolved.people_dir(run_id)
    people.mkdir(parents=True, exist_ok=True)
    (people / "sweep.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    return summary


__all__ = ["home_profile", "run_sweep_arm"]
