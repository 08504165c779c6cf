"""What every step of a ticket's route is handed: the run's home, ids, gate, audit log and rules.

``RunSetup`` is built once per run by ``agents.run`` (or a control session) and passed down to
each room of the route (``agents.lineage``, ``agents.ticket_route``, ``agents.dev_compare``,
``agents.promotion``); none of them reaches back up for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audit import AuditLog
from gate.client import GateClient
from runner import TicketCaps, default_scorer
from segfactory.home import Home
from segfactory.layout import RunLayout, RunsLayout
from segfactory.records import Actor
from synthetic.versions import DatasetVersion

Scorer = Callable[[Path, np.ndarray], np.ndarray]  # (model.onnx, images (N,H,W)) -> probabilities (N,1,H,W)


@dataclass
class RunSetup:
    """The run's fixed facts, built by the CLI (or a control session) before the loop starts."""

    home: Home
    run_id: str
    backend: str
    dataset: DatasetVersion  # the run's dataset version (the classical baseline's incumbent data)
    base_config: Path
    gate: GateClient
    audit: AuditLog
    dev_margin: float  # policies/win_rule.yaml dev_rule.dev_margin
    progress: Callable[[str], None] = lambda line: None
    scorer: Scorer | None = None  # default: runner.default_scorer (intake checks, confined scorer)
    threshold: float = 0.5  # policies/win_rule.yaml threshold: dev scores of candidate and best both use it
    max_epochs: int = 10  # policies/budgets.yaml per-ticket epoch cap (an epochs action stays within it)
    refuse_repeats: bool = True  # refuse a ticket that trains exactly its parent's inputs
    concurrency: int = 1  # tickets the run's one scheduler lets train at once (run --concurrency)
    # The caps a ticket is held to; None: the home profile's (policies/budgets.yaml). A control
    # whose one ticket is the whole arm (the nnU-Net arm) passes the arm's instead.
    ticket_caps: TicketCaps | None = None

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.home, self.run_id)

    @property
    def runs(self) -> RunsLayout:
        return RunsLayout(self.home)

    def audit_event(self, event: str, payload: dict[str, object]) -> None:
        self.audit.append(Actor.SYSTEM, event, payload, run_id=self.run_id)

    def score(self, model: Path, images: np.ndarray) -> np.ndarray:
        """Probabilities of ``model`` on ``images`` from the confined scorer (or the test's stand-in)."""
        return (self.scorer or default_scorer)(model, images)


@dataclass(frozen=True)
class RunRequest:
    """What ``segfactory run`` was asked for (its flags), before anything is set up."""

    home: Home
    profile: str
    proposer: str = "rules"
    backend: str = "bwrap"
    budget_s: float | None = None  # device seconds (--budget)
    wall_s: float | None = None  # --wall
    resume: str | None = None
    progress: Callable[[str], None] = lambda line: None
    judge: str | None = None  # rules | llm:<provider spec>; None: agents.judge.default_judge(proposer)
    code_agent: bool = False  # code drafts get their files from the code-editing agent (agents.code_arm)
    # Stop only on the budget (device, wall, tickets) and start a ticket while any device time is
    # left, as a sweep does: no plateau rule, no half-ticket rule. ``compare`` sets it so that every
    # arm stops by the same rule and spends its budget.
    fill_budget: bool = False
    # Tickets trained at once under the run's one scheduler (--concurrency): a number, or "auto"
    # (the CLI's default): the scheduler sizes it from the cores and the measured memory at start.
    concurrency: int | str = 1
    # Host seeds (training, replicates, the explorer) drawn from a generator seeded with this, so
    # that a run can be reproduced; None: from os.urandom, as a run meant to be trusted should be.
    seed: int | None = None


__all__ = ["RunRequest", "RunSetup", "Scorer"]
