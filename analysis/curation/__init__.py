"""Data curation: whole images and defect masks, plans, versions and the random control.

Public API (docs/curation.md)::

    from analysis.curation import curate_images, curate_defects, apply_plan
    report, plan = curate_images(train, dev, dataset="synthetic/v1", content_hash=version.content_hash)

The experiment that trains a curated version against its random control is orchestration, so it
sits above the libraries: ``controls.curate_compare``.
"""

from analysis.curation.defects import curate_defects, label_issue_ranking
from analysis.curation.images import curate_images
from analysis.curation.neardup import EMBED_MIN_COSINE, NEAR_NEIGHBOUR_BITS, fingerprint, near_duplicates
from analysis.curation.plan import Action, Plan, PlanItem, applied_plans, apply_plan, read_plan, write_plan

__all__ = [
    "EMBED_MIN_COSINE",
    "NEAR_NEIGHBOUR_BITS",
    "Action",
    "Plan",
    "PlanItem",
    "applied_plans",
    "apply_plan",
    "curate_defects",
    "curate_images",
    "fingerprint",
    "label_issue_ranking",
    "near_duplicates",
    "read_plan",
    "write_plan",
]
