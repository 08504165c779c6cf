"""The host side of the loop, as the graph uses it: one facade over the route's rooms.

``HostServices`` is what ``segfactory run`` plugs into the graph (``agents.graph.FactoryServices``).
It holds one of each room and passes calls down; it computes nothing itself:

- ``agents.lineage``: the best, the incumbent, a ticket's parent, plan and fingerprint;
- ``agents.recommendations``: recommendations as concrete changes of the incumbent;
- ``agents.ticket_route``: one ticket from plan through the sandbox to its dev comparison;
- ``agents.dev_compare``: dev scores, the dev rule, scored predictions;
- ``agents.promotion``: the gate's word, promotion, the milestone.

Everything they compute stays on the host; the graph only ever sees the dev-win flag and the
coarse verdict (trust rules 4, 6, 9). Idempotency for ``--resume``: a finished ticket is
answered from its ``outcome.json``; the gate answers a repeated ticket id from its cache;
``promote`` and ``milestone`` check before acting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agents._analysis import analyse_best
from agents.actions import dotted_get
from agents.context import DevAnalysis
from agents.dev_compare import DevComparer
from agents.incumbent import Incumbent
from agents.lineage import LineagePlanner
from agents.promotion import Promoter
from agents.proposer.explore import Observation
from agents.recommendations import Realiser
from agents.run_setup import RunSetup
from agents.state import RunOutcome
from agents.ticket_route import Executor, SandboxExecutor, TicketRoute
from analysis.report import summary_lines
from segfactory.records import CoarseVerdict, Ticket
from synthetic.versions import resolve

TOP_RECOMMENDATIONS = 3  # recommendations printed after each analysis (the demo shows them)


class HostServices:
    """``FactoryServices`` over the real runner and gate. ``execute`` None trains in the sandbox."""

    def __init__(self, setup: RunSetup, execute: Executor | None = None) -> None:
        self.setup = setup
        self.lineage = LineagePlanner(setup)
        self.comparer = DevComparer(setup, self.lineage)
        self.promoter = Promoter(setup, self.comparer)
        self.realiser = Realiser(setup, self.lineage)
        self.route = TicketRoute(setup, self.lineage, self.comparer, execute or SandboxExecutor(setup))
        self.report_writer: Callable[[str, str], None] | None = None  # set by agents._run_loop

    def analyse(self) -> DevAnalysis:
        """The current best on dev (host-computed), as the proposer may see it."""
        best = self.comparer.best()
        self.setup.progress(
            f"analysing the current best {best.sha256[:12]} on dev (object F1 {best.dev_f1:.3f})"
        )
        dataset = resolve(self.setup.home.root, self.lineage.incumbent().dataset)
        report = analyse_best(self.setup, dataset, best.path, best.sha256)
        for n, line in enumerate(summary_lines(report, TOP_RECOMMENDATIONS), 1):
            self.setup.progress(f"  recommendation {n}: {line}")
        self.setup.audit_event(
            "analysis_done", {"model_sha256": best.sha256, "recommendations": len(report.recommendations)}
        )
        return DevAnalysis.from_report(report)

    def realise(self, analysis: DevAnalysis) -> DevAnalysis:
        return self.realiser.realise(analysis)

    def incumbent(self) -> Incumbent:
        return self.lineage.incumbent()

    def check(self, ticket: Ticket) -> list[str]:
        return self.lineage.check(ticket)

    def observations(self, keys: Sequence[str]) -> list[Observation]:
        """Every ticket of this run that trained, as the explorer's study sees it: its patched
        config's values of ``keys`` and its host-computed dev object F1."""
        scores, out = self.dev_scores(), []
        for ticket_id, row in self.lineage.lineage().items():
            params = {key: dotted_get(row.config, key) for key in keys}
            if ticket_id in scores and all(v is not None for v in params.values()):
                out.append(Observation(ticket_id=ticket_id, params=params, value=scores[ticket_id]))
        return out

    def dev_scores(self) -> dict[str, float]:
        """This run's tickets and their host-computed dev object F1 (for the budget plan and the
        explorer's study; people only otherwise, and never in an LLM's context)."""
        return {row.ticket_id: row.object_f1 for row in self.setup.layout.dev_comparisons()}

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        return self.route.run(ticket, wall_left_s)

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        dataset = self.lineage.dataset_for(ticket).ref
        return self.promoter.submit(ticket, model_ref, dataset, replicate_of)

    def promote(self, ticket_id: str) -> None:
        self.promoter.promote(ticket_id)

    def milestone(self, run_id: str) -> None:
        self.promoter.milestone()

    def report(self, run_id: str, stop_reason: str) -> None:
        if self.report_writer is not None:
            self.report_writer(run_id, stop_reason)


__all__ = ["HostServices", "RunSetup"]
