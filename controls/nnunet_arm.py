"""The ``nnunet`` arm of ``compare``: what a team without this factory would run, at the same device time.

One ticket (arm ``nnunet``, kind ``config``) patches the profile's base config to the
``nnunet`` engine (``vision.nnunet``): inside the ticket sandbox, the real ``nnunetv2``
package exports the dataset version to its raw format, plans and preprocesses its 2D
configuration (untuned: its default planner), trains ``nnUNetTrainer`` for as many epochs as
the arm's device-second budget holds, and exports the network to the gate's ONNX contract with
its normalisation folded in and deep supervision off. From there the ticket is any other
candidate (``controls.pipeline.run_candidate``): host-computed dev score, dev rule, confirm-a,
a replicate with a host-chosen seed on confirm-b, the coded judge; the same gate and win rule.

Decisions, written down:
- nnU-Net's "keep the largest connected component" postprocessing is not applied. nnU-Net
  itself turns it on only where its 5-fold cross-validation shows it helps, and it would delete
  all but one void of an image with many; the factory scores every void.
- No test-time mirroring: the exported graph is one forward pass, like every other arm's model.
- The ticket's budget is the whole arm budget (one nnU-Net run, not a search over them); a
  replicate, when confirm-a asks for one, costs up to that again and counts in the arm's
  device-seconds, as a sweep's last trial and replicates do.
- The ticket budget is allowed past the profile's per-ticket cap (``policies/budgets.yaml``
  limits one agent ticket; this arm is one run by construction), up to the arm's budget only.

The plan nnU-Net made (patch, batch, depth, widths, epochs, iterations) is the sandbox's own
report (``result.json``), kept beside the host-computed evidence for people, never as evidence.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import JsonValue

from agents.services import HostServices
from controls.arms import existing_home
from controls.pipeline import CandidateResult, run_candidate
from controls.session import ControlServices, control_session
from segfactory.budgets import TicketCaps
from segfactory.errors import UsageError
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind

NNUNET_MAX_EPOCHS = 1000  # nnU-Net's own epoch count, as the cap; the budget decides how many run
SANDBOX_START_S = 10.0  # device-seconds the sandbox start and imports take before the worker's clock
MIN_BUDGET_S = 60.0  # below this nnU-Net has not finished planning; --budget under it is refused
ARM_FILE = "nnunet.json"  # people/: the arm's candidate result and nnU-Net's plan


def nnunet_ticket(run_id: str, budget_s: float, seed: int) -> Ticket:
    """The arm's one ticket: the base config switched to the nnunet engine, sized to ``budget_s``."""
    change = {
        "engine": "nnunet",
        "epochs": NNUNET_MAX_EPOCHS,
        "nnunet": {"time_budget_s": round(budget_s - SANDBOX_START_S, 1)},
    }
    return Ticket(
        id=f"{run_id}-nnunet",
        arm=Arm.NNUNET,
        kind=TicketKind.CONFIG,
        change=change,
        budget=Budget(device_seconds=budget_s, epochs=NNUNET_MAX_EPOCHS),
        seed=seed,
        hypothesis=f"nnU-Net (nnunetv2, 2D, untuned) trained for {budget_s:g} device-seconds",
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
    )


def arm_services(services: ControlServices, budget_s: float) -> ControlServices:
    """The session's services with the arm's caps: its one ticket may use the arm's whole budget
    (one nnU-Net run, not a search), not the profile's per-ticket cap."""
    caps = TicketCaps(max_device_seconds=budget_s, max_epochs=NNUNET_MAX_EPOCHS)
    return ControlServices(HostServices(replace(services.setup, ticket_caps=caps)))


@dataclass(frozen=True)
class NnunetArmSummary:
    """What the arm did (``people/<run>/nnunet.json``; people only: it holds the dev score)."""

    run_id: str
    budget_s: float
    candidate: CandidateResult
    plan: dict[str, JsonValue] | None  # nnU-Net's own plan, as the sandbox reported it (None: none)
    replicate_plan: dict[str, JsonValue] | None  # the replicate's, when confirm-a asked for one

    def as_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "budget_s": self.budget_s,
            "candidate": self.candidate.model_dump(mode="json"),
            "plan": self.plan,
            "replicate_plan": self.replicate_plan,
        }


def reported_plan(ticket_dir: Path) -> dict[str, JsonValue] | None:
    """nnU-Net's plan as the sandbox reported it (``outcome.json`` keeps the worker's result.json)."""
    outcome = ticket_dir / "outcome.json"
    if not outcome.is_file():
        return None
    reported = json.loads(outcome.read_text()).get("sandbox_reported") or {}
    plan = reported.get("plan") if isinstance(reported, dict) else None
    return plan if isinstance(plan, dict) else None


def run_nnunet_arm(
    home: Path | None,
    *,
    budget_s: float,
    profile: str,
    backend: str,
    run_id: str,
    progress: Callable[[str], None] = lambda line: None,
) -> NnunetArmSummary:
    """Run the arm in a control session; returns its summary (people only: it holds the dev score)."""

    if budget_s < MIN_BUDGET_S:
        raise UsageError(f"the nnunet arm needs at least {MIN_BUDGET_S:g} device-seconds; got {budget_s:g}")
    resolved = existing_home(home, profile)
    with control_session(
        resolved, backend=backend, profile=profile, run_id=run_id, kind="nnunet", progress=progress
    ) as s:
        services = arm_services(s.services, budget_s)
        ticket = nnunet_ticket(run_id, budget_s, s.make_seed())
        candidate = run_candidate(services, s.judge, ticket, s.make_seed)
    tickets = resolved.tickets_dir(run_id)
    plan = reported_plan(tickets / ticket.id) or {}
    summary = NnunetArmSummary(
        run_id=run_id,
        budget_s=budget_s,
        candidate=candidate,
        plan=plan or None,
        replicate_plan=reported_plan(tickets / candidate.replicate_id) if candidate.replicate_id else None,
    )
    people = resolved.people_dir(run_id)
    people.mkdir(parents=True, exist_ok=True)
    (people / ARM_FILE).write_text(json.dumps(summary.as_json(), indent=2, sort_keys=True))
    progress(
        f"nnunet arm {run_id}: dev {candidate.dev_score} ({candidate.status}, {candidate.decision}); "
        f"plan patch {plan.get('patch_size')} batch {plan.get('batch_size')} stages {plan.get('n_stages')}, "
        f"{plan.get('iterations')} iterations in {plan.get('epochs')} epochs "
        f"of up to {plan.get('iterations_per_epoch')}"
    )
    return summary


__all__ = [
    "NNUNET_MAX_EPOCHS",
    "NnunetArmSummary",
    "arm_services",
    "nnunet_ticket",
    "reported_plan",
    "run_nnunet_arm",
]
