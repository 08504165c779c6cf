"""The report's outcome: the best's sealed score against the classical detector and the run's start.

Read from the run's records only: the final milestone (``people/milestones/<run>-final.json``:
the best and the classical detector on sealed and never-queried), the chain milestone
(``<run>-chain.json``: sealed scores of this run's promotions and their parents that the final one
did not score) and ``runs/promotions.jsonl`` (which model came from which ticket, and what each
promotion built on). A model no promotion names is the classical detector: `init` registers it
as the first best, and the best moves only by a promotion.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from agents._report_records import Headline, SealedScore
from agents.promotion import MilestoneFile
from gate.milestone_report import ModelScore
from segfactory.layout import Promotion, RunLayout

SEALED = "sealed"


def read_milestone(layout: RunLayout, part: str = "final") -> MilestoneFile | None:
    """``people/milestones/<run>-<part>.json``, or None when there is none or it cannot be read
    (then the report says it was not scored)."""
    path = layout.milestone(f"{layout.run_id}-{part}")
    if not path.is_file():
        return None
    try:
        return MilestoneFile.model_validate_json(path.read_text())
    except ValidationError:
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
    milestone: MilestoneFile | None, chain: MilestoneFile | None, promotions: Sequence[Promotion], run_id: str
) -> Headline:
    """The outcome record of ``run_id``; ``missing`` says why a score is absent."""
    ours = [p for p in promotions if p.run_id == run_id and p.kind == "promotion"]
    promoted = [p.ticket_id for p in ours]
    if milestone is None:
        return Headline(promoted=promoted, missing="no milestone was scored")
    if milestone.error:
        return Headline(promoted=promoted, missing=f"the gate refused the milestone: {milestone.error}")
    sealed = milestone.tiers.get(SEALED)
    if sealed is None or sealed.error:
        why = sealed.error if sealed is not None else "the milestone holds no sealed tier"
        return Headline(promoted=promoted, missing=f"the sealed tier was not scored: {why}")
    ticket_of = {p.sha256: p.ticket_id for p in promotions if p.kind == "promotion"}
    chained = chain.tiers.get(SEALED) if chain is not None else None
    scores = {**(chained.models if chained is not None else {}), **sealed.models}
    best_sha = milestone.best_sha256 or ""
    classical = next((sha for sha in milestone.models if sha not in ticket_of), None)
    start_sha = (ours[0].parent_sha256 or None) if ours else best_sha

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


__all__ = ["headline", "read_milestone"]
