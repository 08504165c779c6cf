"""``curate compare``: the curated version against a random control of the same size.

The control plan removes the same number of *random* train images (seeded) from the same parent
version, so "curation" is compared with "removing that many items at random". Both versions go
through the same executor as ``curation`` tickets with the same budget, epochs and training
seed. The executor is injectable (``controls.executor``); its ``RunnerExecutor`` is the real one: it
calls ``runner.execute_ticket`` (sandboxed training, host-computed dev metrics) and, when a gate
client is given, the gate. The result says which arm did better on dev and carries the coarse
verdicts; the sealed worst-slice score is reported at the next milestone, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from analysis.curation.plan import Action, Plan, PlanItem, apply_plan
from controls.executor import ExecutedTicket, TicketExecutor
from segfactory.errors import DataError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from synthetic.splits import read_split
from synthetic.versions import DatasetVersion, resolve

CONTROL_EPOCHS = 8  # default epochs per ticket in the comparison (both arms; the budget may stop it sooner)


class CurationArm(ExecutedTicket):
    """One side of the comparison: its dataset version, its ticket and what running it came to."""

    dataset: str
    ticket: str


class CurationCompare(BaseModel):
    """``curate compare``'s result (``--json`` prints it as it is)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    curated: CurationArm
    control: CurationArm  # as many random items removed, same budget and seed
    budget_s: float
    seed: int
    epochs: int
    removed: int  # items the plan removes
    dev_better: Literal["curated", "control", "tie"] | None  # None: an arm has no dev dice
    note: str


def control_plan(home_root: Path, plan: Plan, seed: int) -> Plan:
    """Remove as many random train images as the plan removes (same parent version)."""
    removed = [it for it in plan.items if it.action == Action.REMOVE and it.split == "train"]
    if not removed:
        raise DataError("the plan removes no train images; its random control would be the unchanged set")
    n_train = len(read_split(resolve(home_root, plan.dataset).train, mmap=True))
    picks = np.random.default_rng(seed).choice(n_train, size=len(removed), replace=False)
    items = [
        PlanItem(split="train", image_id=int(k), action=Action.REMOVE, reason=f"random control (seed {seed})")
        for k in sorted(picks.tolist())
    ]
    return Plan(
        kind="control",
        dataset=plan.dataset,
        content_hash=plan.content_hash,
        items=items,
        note=f"random control for plan {plan.plan_hash[:12]}",
    )


def _ticket(tid: str, version: DatasetVersion, budget_s: float, seed: int, what: str, epochs: int) -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.CURATION,
        kind=TicketKind.CURATION,
        seed=seed,
        hypothesis=f"{what} ({version.ref}) trains a better model than its counterpart at equal budget",
        change={},
        budget=Budget(device_seconds=budget_s, epochs=epochs),
        expected_effect=ExpectedEffect(metric="dice", direction=Direction.UP, size=0.0),
        evidence=[f"dataset:{version.ref}"],
    )


def _version_of(home_root: Path, plan: Plan) -> DatasetVersion:
    """The version a plan made (from the dataset's applied-plans record); apply it if it was not."""
    import json

    name = plan.dataset.split("/")[0]
    record = home_root / "datasets" / name / "plans.json"
    made = json.loads(record.read_text()).get(plan.plan_hash) if record.is_file() else None
    return resolve(home_root, made) if made else apply_plan(home_root, plan)[0]


def compare_plan(
    home_root: Path,
    plan: Plan,
    *,
    budget_s: float,
    seed: int,
    executor: TicketExecutor,
    epochs: int = CONTROL_EPOCHS,
) -> CurationCompare:
    """Run the curated and the random-control versions as two curation tickets; report both."""
    curated = _version_of(home_root, plan)
    control = _version_of(home_root, control_plan(home_root, plan, seed))
    tag = plan.plan_hash[:8]
    arms = {}
    for key, version, what in (
        ("curated", curated, "the curated set"),
        ("control", control, "a random subset"),
    ):
        ticket = _ticket(f"cur-{tag}-{key}-s{seed}", version, budget_s, seed, what, epochs)
        ran = executor(ticket, version)
        arms[key] = CurationArm(dataset=version.ref, ticket=ticket.id, **ran.model_dump())
    dice = {k: (v.dev_metrics or {}).get("dice") for k, v in arms.items()}
    better: Literal["curated", "control", "tie"] | None = None
    if dice["curated"] is not None and dice["control"] is not None:
        better = (
            "curated"
            if dice["curated"] > dice["control"]
            else "control"
            if dice["control"] > dice["curated"]
            else "tie"
        )
    return CurationCompare(
        curated=arms["curated"],
        control=arms["control"],
        budget_s=budget_s,
        seed=seed,
        epochs=epochs,
        removed=len(plan.items),
        dev_better=better,
        note="one seed is an anecdote; the sealed worst-slice score comes at the next milestone",
    )
