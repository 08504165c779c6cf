"""The last room of a ticket's route: the gate's word, the promotion, and the run's milestone.

``submit`` asks the gate (confirm-a, or confirm-b for a replicate) and returns only the coarse
verdict. ``promote`` asks the gate to move the global best: the gate checks its own ledger for
the confirm-a WIN and the replicate WIN, and the host records its copy of the model with the
ticket's lineage (``runs/promotions.jsonl``), so the next ticket builds on it. ``milestone``
scores the run's best (and the classical baseline) once on the sealed and never-queried tiers,
for people only.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from agents.dev_compare import DevComparer
from agents.run_setup import RunSetup
from audit.gate_events import pull
from gate.milestone_report import TierScores
from runner import TicketOutcome
from segfactory.errors import GateError
from segfactory.files import write_atomic
from segfactory.layout import Promotion
from segfactory.records import CoarseVerdict, Result, Ticket, sha256_file

MILESTONE_TIERS = ["sealed", "never-queried"]
MILESTONE_CHAIN_MODELS = 3  # extra sealed scores per run for the promoted predictions (sealed quota: 5)


class MilestoneFile(Result):
    """``people/milestones/<name>.json``: the gate's report (or why it refused) and the models by
    sha256. ``best_sha256`` is set on the run's final milestone."""

    name: str
    run_id: str
    tiers: dict[str, TierScores] = Field(default_factory=dict)
    error: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    best_sha256: str | None = None


class Promoter:
    """The gate's side of the route, through its client (only the gate opens the vault)."""

    def __init__(self, setup: RunSetup, comparer: DevComparer) -> None:
        self.setup, self.comparer = setup, comparer

    def submit(
        self, ticket: Ticket, model_ref: str, dataset_ref: str, replicate_of: str | None
    ) -> CoarseVerdict:
        s = self.setup
        verdict = s.gate.submit(model_ref, dataset_ref, ticket.id, replicate_of=replicate_of, run_id=s.run_id)
        pull(s.gate, s.audit)
        s.progress(
            f"  {ticket.id}: {verdict.tier} {verdict.verdict.value} ({verdict.queries_left} queries left)"
        )
        return verdict

    def promote(self, ticket_id: str) -> None:
        """Ask the gate to promote; record the host copy with its lineage once (idempotent: the
        gate answers a repeated promotion with the same best)."""
        s = self.setup
        model = s.layout.ticket(ticket_id).model
        sha = sha256_file(model)
        already = any(row.sha256 == sha for row in s.runs.promotions())
        promoted = s.gate.promote(ticket_id)
        if promoted != sha:
            raise GateError(
                f"gate promoted model {promoted[:12]} for {ticket_id}, but the host copy is {sha[:12]}"
            )
        if not already:
            s.runs.append_promotion(self._row(ticket_id, model, sha))
            s.audit_event("best_promoted", {"ticket_id": ticket_id, "model_sha256": sha})
            s.progress(f"  {ticket_id}: PROMOTED, the new current best is {sha[:12]}")
        pull(s.gate, s.audit)

    def _row(self, ticket_id: str, model: Path, sha: str) -> Promotion:
        """The promotion with the ticket's lineage and its copied-out weights (what the next ticket
        patches and may continue from)."""
        row = Promotion(model=str(model), sha256=sha, run_id=self.setup.run_id, ticket_id=ticket_id)
        lineage = self.setup.layout.lineage().get(ticket_id)
        if lineage is None:
            return row
        outcome = self.setup.layout.ticket(ticket_id).outcome
        evidence = (
            TicketOutcome.model_validate_json(outcome.read_text()).evidence if outcome.is_file() else None
        )
        return Promotion(
            model=row.model,
            sha256=sha,
            run_id=row.run_id,
            ticket_id=ticket_id,
            config=lineage.config,
            dataset=lineage.dataset,
            dataset_hash=lineage.dataset_hash,
            code=lineage.code,
            fingerprint=lineage.fingerprint,
            parent_sha256=lineage.parent_sha256,
            checkpoint_sha256=(evidence.checkpoint_sha256 or "") if evidence else "",
            init_from=lineage.init_from,
        )

    def promoted_in_run(self) -> list[Promotion]:
        return [
            r for r in self.setup.runs.promotions() if r.run_id == self.setup.run_id and r.kind == "promotion"
        ]

    def milestone(self) -> None:
        """The run's final milestone (once): its best and the classical baseline, then the sealed
        scores of the run's promoted predictions."""
        s = self.setup
        name = f"{s.run_id}-final"
        target = s.layout.milestone(name)
        if target.is_file():
            return
        best = self.comparer.best()
        models = [best.path]
        baseline = s.runs.baseline_model
        if baseline.is_file() and baseline != best.path:
            models.insert(0, baseline)
        report = self._milestone(name, models, MILESTONE_TIERS).model_copy(
            update={"best_sha256": best.sha256}
        )
        _write(target, report)
        if report.error is None:
            sealed = self._with_chain(report, models).tiers.get("sealed")
            self.comparer.predictions().sealed(self.promoted_in_run(), sealed.models if sealed else {})
        pull(s.gate, s.audit)
        s.audit_event("milestone_written", {"name": name, "file": str(target), "error": report.error})

    def _milestone(self, name: str, models: list[Path], tiers: list[str]) -> MilestoneFile:
        s = self.setup
        s.progress(f"milestone {name}: scoring {len(models)} model(s) on {', '.join(tiers)}")
        shas = {sha256_file(m): str(m) for m in models}
        try:
            got = s.gate.milestone(name, s.run_id, models, tiers)
        except GateError as exc:  # quota spent, say: the run still ends with its report
            return MilestoneFile(name=name, run_id=s.run_id, error=str(exc), models=shas)
        return MilestoneFile(name=got.name, run_id=got.run_id, tiers=got.tiers, models=shas)

    def _with_chain(self, final: MilestoneFile, scored: list[Path]) -> MilestoneFile:
        """Sealed scores of every promotion of this run and its parent, for the promoted
        predictions: the final milestone's, plus a sealed-only milestone for the models it did
        not score."""
        s = self.setup
        known = {r.sha256: Path(r.model) for r in s.runs.promotions()}
        known[sha256_file(s.runs.baseline_model)] = s.runs.baseline_model
        wanted: list[Path] = []
        for promo in self.promoted_in_run():
            for path in (known.get(promo.parent_sha256), Path(promo.model)):
                if path is not None and path.is_file() and path not in scored and path not in wanted:
                    wanted.append(path)
        if not wanted:
            return final
        chain = self._milestone(f"{s.run_id}-chain", wanted[:MILESTONE_CHAIN_MODELS], ["sealed"])
        _write(s.layout.milestone(f"{s.run_id}-chain"), chain)
        sealed = final.tiers.get("sealed")
        extra = chain.tiers.get("sealed")
        if sealed is None or extra is None:
            return final
        merged = sealed.model_copy(update={"models": {**sealed.models, **extra.models}})
        return final.model_copy(update={"tiers": {**final.tiers, "sealed": merged}})


def _write(path: Path, report: MilestoneFile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(report.as_json(), indent=2, sort_keys=True))


__all__ = ["MILESTONE_TIERS", "MilestoneFile", "Promoter"]
