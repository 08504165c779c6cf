"""How a run spends its device budget: cheap screens, rungs that continue the best, a long final.

``policies/budget_plan.yaml`` splits a profile's run budget (device-seconds) into three written
shares, spent in order:

1. **screen**: the proposer's tickets (the base config, the analysis's recommendations, the
   explorer's samples), each at the screen's short budget, from fresh weights or the incumbent's;
2. **rungs** (successive halving): the best ``keep`` share of the previous level's tickets by
   host-computed dev object F1 each continue their own checkpoint for a rung's budget
   (``Ticket.continues`` naming the ticket), level after level while the share lasts;
3. **final**: the best recipe so far (the incumbent, or the best ticket of the run) continues its
   weights with what the final share holds, half for the ticket and half for the replicate a
   confirm-a WIN owes; only this ticket may pass the per-ticket cap, and only where the plan says
   ``may_exceed_ticket_cap``. When it has been trained (and its replicate), the run ends.

The planner is host code: it ranks by dev scores (dev is open), which never enter an LLM's
context, and every ticket it makes is recorded in ``runs/<id>/budget_plan.jsonl`` with its phase,
so the runner grants the final's budget to that ticket alone and the report shows where the
budget went. A plan whose shares sum to more than 1 is refused at start, naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents._paths import POLICY_DIR
from agents.actions import load_yaml_policy
from agents.incumbent import Incumbent
from agents.state import FactoryState
from segfactory.budgets import RunCaps, TicketCaps
from segfactory.layout import PlanRow, RunLayout
from segfactory.records import (
    INCUMBENT,
    Arm,
    Budget,
    Direction,
    ExpectedEffect,
    Ticket,
    TicketKind,
)

BUDGET_PLAN = POLICY_DIR / "budget_plan.yaml"
PLAN_EVIDENCE = "budget-plan"  # evidence prefix of the tickets the planner makes
Phase = Literal["screen", "rung", "final", "package"]
MIN_FINAL_S = 30.0  # device-seconds: below this the final is not worth a sandbox start; the run ends
RUNG_GAIN = 0.01  # object F1 a rung or the final is predicted to gain (the dev rule's order)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Screen(_Strict):
    share: float = Field(ge=0, le=1)
    ticket_s: float = Field(gt=0)  # device-seconds of one screen


class Rungs(_Strict):
    share: float = Field(ge=0, le=1)
    ticket_s: float = Field(gt=0)  # device-seconds of one rung ticket
    keep: float = Field(gt=0, le=1)  # share of the previous level that continues (at least one)


class Final(_Strict):
    share: float = Field(ge=0, le=1)
    may_exceed_ticket_cap: bool = False  # the written rule: the final alone may pass the per-ticket cap


class Package(_Strict):
    """After the final: the run's best ``top_k`` models on dev packaged as one (a ticket that
    trains nothing: the ensemble, flip views, threshold and minimum void size chosen on a split
    carved from train; vision.packaging)."""

    top_k: int = Field(ge=2, le=8)
    ticket_s: float = Field(gt=0)  # device-seconds of the packaging ticket
    flips: tuple[Literal["h", "v", "hv"], ...] = ("h",)
    min_sizes: tuple[int, ...] = (1, 2, 3)


class ProfilePlan(_Strict):
    screen: Screen
    rungs: Rungs
    final: Final
    package: Package | None = None  # None: the run ends with its final

    @model_validator(mode="after")
    def _shares(self) -> ProfilePlan:
        total = self.screen.share + self.rungs.share + self.final.share
        if total > 1 + 1e-9:
            raise ValueError(
                f"the shares of screen, rungs and final sum to {total:g}; they must sum to at most 1"
            )
        return self


class PlanPolicy(_Strict):
    schema_version: Literal[1]
    profiles: dict[str, ProfilePlan]


def load_plan(profile: str, path: Path = BUDGET_PLAN) -> ProfilePlan | None:
    """The profile's plan, or None when the file has none for it; a plan that does not hold (its
    shares sum past 1, say) is a PolicyError naming the file and line."""
    policy: PlanPolicy = load_yaml_policy(path, PlanPolicy)
    return policy.profiles.get(profile)


class BudgetPlanner:
    """Decides, at each propose step, whose turn it is: the proposer's screens, a rung, the final.

    ``dev_scores`` returns the host-computed dev object F1 of this run's tickets (people only;
    never shown to an LLM). ``incumbent`` is the current best as the next ticket would patch it.
    """

    def __init__(
        self,
        plan: ProfilePlan,
        layout: RunLayout,
        caps: RunCaps,
        ticket_caps: TicketCaps,
        dev_scores: Callable[[], dict[str, float]],
    ) -> None:
        self.plan, self.layout, self.caps, self.ticket_caps = plan, layout, caps, ticket_caps
        self.dev_scores = dev_scores

    # -- which phase ----------------------------------------------------------------------------
    def phase(self, spent: float) -> Phase:
        total = self.caps.device_seconds
        if spent < self.plan.screen.share * total:
            return "screen"
        if spent < (self.plan.screen.share + self.plan.rungs.share) * total:
            return "rung"
        return "final"

    def fit_screens(self, tickets: list[Ticket], spent: float) -> list[Ticket]:
        """The proposer's screens, in its order, that fit in what is left of the screen share at
        their screen budgets (at least the first, so the plan moves on): a batch proposed just
        before the share ran out no longer spends the rungs' share on screens."""
        room = self.plan.screen.share * self.caps.device_seconds - spent
        kept: list[Ticket] = []
        for ticket in tickets:
            cost = self.screen_budget(ticket.budget).device_seconds
            if kept and cost > room:
                break
            kept.append(ticket)
            room -= cost
        return kept

    def screen_budget(self, asked: Budget) -> Budget:
        """A screen's budget: the proposer's, cut to the screen's device-seconds."""
        return Budget(
            device_seconds=min(asked.device_seconds, self.plan.screen.ticket_s), epochs=asked.epochs
        )

    # -- the tickets the planner makes ------------------------------------------------------------
    def tickets(
        self,
        state: FactoryState,
        incumbent: Incumbent,
        make_id: Callable[[], str],
        make_seed: Callable[[], int],
        *,
        screens_done: bool = False,
    ) -> list[Ticket] | None:
        """The planner's tickets for this step; None: the proposer's turn (a screen).
        ``screens_done``: the proposer has nothing more to screen, so the rungs start early."""
        rows = self.layout.plan_rows()
        if any(r.phase == "package" for r in rows):
            return []  # the package was queued: the plan is done
        if any(r.phase == "final" for r in rows):
            return self._package(rows, make_id, make_seed)
        phase = self.phase(state.device_seconds)
        if phase == "screen" and not screens_done:
            return None
        if phase != "final":  # the rungs, with whatever the screens left of their share too
            rungs = self._rungs(state, rows, make_id, make_seed)
            if rungs:
                return rungs
        return self._final(state, rows, incumbent, make_id, make_seed)

    def _rungs(
        self,
        state: FactoryState,
        rows: list[PlanRow],
        make_id: Callable[[], str],
        make_seed: Callable[[], int],
    ) -> list[Ticket]:
        """The best ``keep`` of the deepest level not yet continued, each continuing itself."""
        scores = self.dev_scores()
        room = (
            self.plan.screen.share + self.plan.rungs.share
        ) * self.caps.device_seconds - state.device_seconds
        level = max((r.level for r in rows), default=0)
        done = {r.continues for r in rows if r.phase == "rung"}
        pool = [r for r in rows if r.level == level and r.ticket_id in scores and r.ticket_id not in done]
        if len(pool) < 2:  # one survivor: halving is over, the final trains it long
            return []
        keep = max(1, math.floor(len(pool) * self.plan.rungs.keep))
        best = sorted(pool, key=lambda r: scores[r.ticket_id], reverse=True)[:keep]
        budget_s = min(self.plan.rungs.ticket_s, self.ticket_caps.max_device_seconds)
        out = []
        for row in best:
            if room < budget_s:
                break
            room -= budget_s
            ticket = self._ticket(
                make_id(),
                make_seed(),
                "rung",
                continues=row.ticket_id,
                budget_s=budget_s,
                hypothesis=f"rung {level + 1}: {row.ticket_id} continues its own weights for {budget_s:g} "
                "more device-seconds (successive halving: it is among the best of its level on dev)",
            )
            self.record(ticket, "rung", level + 1)
            out.append(ticket)
        return out

    def _final(
        self,
        state: FactoryState,
        rows: list[PlanRow],
        incumbent: Incumbent,
        make_id: Callable[[], str],
        make_seed: Callable[[], int],
    ) -> list[Ticket]:
        """The best recipe so far continues its weights with half of what is left once the package
        (and its replicate) is set aside; the other half pays for the replicate a WIN owes."""
        package = self.plan.package
        kept = 2 * package.ticket_s if package is not None else 0.0  # the package and its replicate
        left = self.caps.device_seconds - state.device_seconds - kept
        budget_s = left / 2
        if not self.plan.final.may_exceed_ticket_cap:
            budget_s = min(budget_s, self.ticket_caps.max_device_seconds)
        if budget_s < MIN_FINAL_S:
            return []
        continues, what = self._best_weights(rows, incumbent)
        ticket = self._ticket(
            make_id(),
            make_seed(),
            "final",
            continues=continues,
            budget_s=budget_s,
            hypothesis=f"final: {what} trains on for {budget_s:.0f} device-seconds (the budget plan's "
            "long training of the best recipe so far)",
        )
        self.record(ticket, "final", max((r.level for r in rows), default=0) + 1)
        return [ticket]

    def _package(
        self, rows: list[PlanRow], make_id: Callable[[], str], make_seed: Callable[[], int]
    ) -> list[Ticket]:
        """The run's best ``top_k`` tickets on dev packaged as one model (when the plan asks)."""
        spec = self.plan.package
        scores = self.dev_scores()
        if spec is None or len(scores) < 2:
            return []
        members = sorted(scores, key=lambda tid: scores[tid], reverse=True)[: spec.top_k]
        ticket = Ticket(
            id=make_id(),
            arm=Arm.AGENT,
            kind=TicketKind.PACKAGE,
            hypothesis=f"package: the run's best {len(members)} models on dev as one ensemble with flip "
            "views, its threshold and minimum void size chosen on a split carved from train",
            change={"flips": list(spec.flips), "min_sizes": list(spec.min_sizes)},
            budget=Budget(device_seconds=spec.ticket_s, epochs=1),
            expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=RUNG_GAIN),
            evidence=[f"{PLAN_EVIDENCE}:package"],
            seed=make_seed(),
        )
        self.layout.append_plan_row(
            PlanRow(
                ticket_id=ticket.id,
                phase="package",
                level=max(r.level for r in rows) + 1,
                budget_s=spec.ticket_s,
                members=members,
            )
        )
        return [ticket]

    def _best_weights(self, rows: list[PlanRow], incumbent: Incumbent) -> tuple[str | None, str]:
        """What the final continues: the incumbent's weights when it has them (the best the gate
        confirmed); else (the classical baseline) the run's best ticket on dev; else fresh weights."""
        if incumbent.checkpoint is not None:
            return INCUMBENT, f"the current best ({incumbent.sha256[:12]})"
        scores = self.dev_scores()
        ranked = sorted(
            (r for r in rows if r.ticket_id in scores), key=lambda r: scores[r.ticket_id], reverse=True
        )
        if ranked:
            return ranked[0].ticket_id, f"ticket {ranked[0].ticket_id}, the run's best on dev"
        return None, "the current best's recipe, from fresh weights,"

    def _ticket(
        self,
        ticket_id: str,
        seed: int,
        phase: Phase,
        *,
        continues: str | None,
        budget_s: float,
        hypothesis: str,
    ) -> Ticket:
        return Ticket(
            id=ticket_id,
            arm=Arm.AGENT,
            kind=TicketKind.CONFIG,
            hypothesis=hypothesis,
            change={},
            budget=Budget(device_seconds=budget_s, epochs=self.ticket_caps.max_epochs),
            expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=RUNG_GAIN),
            evidence=[f"{PLAN_EVIDENCE}:{phase}"],
            seed=seed,
            continues=continues,
        )

    def end_reason(self) -> str:
        """Why the plan has nothing more to run: its final (and package) ran, or too little was left."""
        phases = {r.phase for r in self.layout.plan_rows()}
        if "package" in phases:
            return "budget plan: the final training and the package ran"
        if "final" in phases:
            return "budget plan: the final training ran"
        return f"budget plan: under {2 * MIN_FINAL_S:g} device-seconds left for the final and its replicate"

    # -- the ledger -------------------------------------------------------------------------------
    def record(self, ticket: Ticket, phase: Phase, level: int) -> None:
        self.layout.append_plan_row(
            PlanRow(
                ticket_id=ticket.id,
                phase=phase,
                level=level,
                budget_s=ticket.budget.device_seconds,
                continues=ticket.continues,
            )
        )

    def record_screens(self, tickets: list[Ticket]) -> None:
        for ticket in tickets:
            if ticket.replicate_of is None:
                self.record(ticket, "screen", 0)


def final_caps(layout: RunLayout, ticket: Ticket, caps: TicketCaps) -> TicketCaps:
    """The caps a ticket is held to: the plan's final (and its replicate) may pass the per-ticket
    cap by the budget the plan recorded for it; every other ticket keeps ``caps``."""
    key = ticket.replicate_of or ticket.id
    for row in layout.plan_rows():
        if row.ticket_id == key and row.phase == "final" and row.budget_s > caps.max_device_seconds:
            return TicketCaps(max_device_seconds=row.budget_s, max_epochs=caps.max_epochs)
    return caps


def is_final(layout: RunLayout, ticket: Ticket) -> bool:
    key = ticket.replicate_of or ticket.id
    return any(r.ticket_id == key and r.phase == "final" for r in layout.plan_rows())


__all__ = [
    "BUDGET_PLAN",
    "PLAN_EVIDENCE",
    "BudgetPlanner",
    "ProfilePlan",
    "final_caps",
    "is_final",
    "load_plan",
]
