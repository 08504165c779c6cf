"""The report's outcome: the best's sealed score against the classical detector and the run's start.

Read from the run's records only: the final milestone (``people/milestones/<run>-final.json``:
the best and the classical detector on sealed and never-queried), the chain milestone
(``<run>-chain.json``: sealed scores of this run's promotions and their parents that the final one
did not score) and ``runs/promotions.jsonl`` (which model came from which ticket, and what each
promotion built on). A model no promotion names is the classical detector: `init` registers it
as the first best, and the best moves only by a promotion.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agents._report_records import Headline, SealedScore
from gate.milestone_report import ModelScore, TierScores

MILESTONES_DIR = "milestones"  # people/milestones/: <run>-final.json, <run>-chain.json
SEALED = "sealed"


def read_milestone(people: Path, run_id: str, part: str = "final") -> dict[str, Any] | None:
    """``people/milestones/<run>-<part>.json`` as written, or None when there is none."""
    path = people / MILESTONES_DIR / f"{run_id}-{part}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _sealed(milestone: dict[str, Any] | None) -> TierScores | None:
    block = ((milestone or {}).get("tiers") or {}).get(SEALED)
    try:
        return TierScores.model_validate(block) if block is not None else None
    except ValidationError:  # a block this code cannot read is reported as not scored
        return None


def _score(sha: str, score: ModelScore, ticket_of: dict[str, str]) -> SealedScore:
    f1 = score.object_f1
    return SealedScore(
        sha256=sha,
        ticket_id=ticket_of.get(sha),
        estimate=f1.estimate,
        low=f1.low,
        high=f1.high,
        alpha=f1.alpha,
        n_images=score.n_images,
    )


def headline(
    milestone: dict[str, Any] | None,
    chain: dict[str, Any] | None,
    promotions: Sequence[dict[str, Any]],
    run_id: str,
) -> Headline:
    """The outcome record of ``run_id``; ``missing`` says why a score is absent."""
    ours = [p for p in promotions if p.get("run_id") == run_id]
    promoted = [str(p.get("ticket_id")) for p in ours]
    if milestone is None:
        return Headline(promoted=promoted, missing="no milestone was scored")
    if milestone.get("error"):
        return Headline(promoted=promoted, missing=f"the gate refused the milestone: {milestone['error']}")
    sealed = _sealed(milestone)
    if sealed is None or sealed.error:
        why = sealed.error if sealed is not None else "the milestone holds no sealed tier"
        return Headline(promoted=promoted, missing=f"the sealed tier was not scored: {why}")
    ticket_of = {str(p["sha256"]): str(p.get("ticket_id")) for p in promotions if p.get("sha256")}
    chained = _sealed(chain)
    scores = {**(chained.models if chained is not None else {}), **sealed.models}
    best_sha = str(milestone.get("best_sha256", ""))
    classical = next((sha for sha in milestone.get("models", {}) if sha not in ticket_of), None)
    start_sha = ours[0].get("parent_sha256") if ours else best_sha

    def scored(sha: str | None) -> SealedScore | None:
        return _score(sha, scores[sha], ticket_of) if sha in scores and sha is not None else None

    best = scored(best_sha)
    return Headline(
        best=best,
        classical=scored(classical),
        start=scored(start_sha),
        start_sha256=start_sha,
        promoted=promoted,
        tier_version=sealed.version,
        missing=None if best is not None else "the milestone holds no sealed score of the best",
    )


__all__ = ["MILESTONES_DIR", "headline", "read_milestone"]
