"""The third room of a ticket's route: its dev score against the current best's, on the host.

A ticket is a dev win when its host-computed dev object F1 beats the current best's by the win
rule's ``dev_margin``; only a dev win goes to the gate. Both are scored at the win rule's
threshold, so a ticket cannot move its own threshold past the dev rule. The comparison row goes
to ``people/`` (never an agent's context), and the ticket's predicted effect is scored here
against its parent (``agents._predictions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agents._predictions import Predictions
from agents.incumbent import DEFAULT_ACTION_EVIDENCE
from agents.lineage import LineagePlanner
from agents.run_setup import RunSetup
from agents.state import RunOutcome
from segfactory.errors import DataError
from segfactory.layout import DevComparison, Lineage
from segfactory.records import Ticket
from synthetic.splits import Split, read_split
from vision.metrics import aggregate, per_image_metrics

TABLE_KEYS = ("object_f1", "object_recall", "object_precision", "pixel_iou", "dice", "boundary_iou")


@dataclass(frozen=True)
class Best:
    """The current best with its host-computed dev metrics."""

    sha256: str
    path: Path
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def dev_f1(self) -> float:
        return float(self.metrics.get("object_f1", 0.0))


class DevComparer:
    """Scores models on the run's dev split and compares tickets with the current best."""

    def __init__(self, setup: RunSetup, lineage: LineagePlanner) -> None:
        self.setup, self.lineage = setup, lineage
        self._best: Best | None = None
        self._predictions: Predictions | None = None
        self._dev: Split | None = None

    def dev(self) -> Split:
        if self._dev is None:
            self._dev = read_split(self.setup.dataset.dev)
        return self._dev

    def best(self) -> Best:
        """The current best with its dev metrics (recomputed when the best moves)."""
        sha, path = self.lineage.best_model()
        if self._best is None or self._best.sha256 != sha:
            self._best = Best(sha, path, self.dev_metrics(path))
        return self._best

    def dev_metrics(self, model: Path) -> dict[str, float]:
        dev = self.dev()
        prob = np.asarray(self.setup.score(model, dev.images))[:, 0]
        metrics = aggregate(per_image_metrics(prob, dev.masks, threshold=self.setup.threshold))
        return {k: float(v) for k, v in metrics.items()}

    def predictions(self) -> Predictions:
        if self._predictions is None:
            s = self.setup
            self._predictions = Predictions(s.home, s.run_id, self.dev(), s.threshold, s.score)
        return self._predictions

    def compare(
        self, ticket: Ticket, lineage: Lineage, metrics: dict[str, float], seconds: float, model: Path
    ) -> RunOutcome:
        """Record the ticket's dev score against the best's, score its prediction, and say whether
        it is a dev win (a default-action control is recorded but never submitted)."""
        best = self.best()
        f1 = float(metrics["object_f1"])
        win = f1 - best.dev_f1 >= self.setup.dev_margin
        self.setup.layout.append_dev_comparison(
            DevComparison(
                ticket_id=ticket.id,
                object_f1=f1,
                best_object_f1=best.dev_f1,
                best_sha256=best.sha256,
                dev_margin=self.setup.dev_margin,
                dev_win=win,
                metrics=metrics,
                threshold=self.setup.threshold,
                parent_sha256=lineage.parent_sha256,
            )
        )
        name = "classical" if best.path == self.setup.runs.baseline_model else best.sha256[:12]
        for line in metrics_table(metrics, best.metrics, name):
            self.setup.progress(line)
        if model.is_file():
            self._score_prediction(ticket, lineage, model)
        return self._outcome(ticket, f1, best.dev_f1, win, seconds, model)

    def _outcome(
        self, ticket: Ticket, f1: float, best_f1: float, win: bool, seconds: float, model: Path
    ) -> RunOutcome:
        if ticket.evidence == [DEFAULT_ACTION_EVIDENCE]:
            self.setup.progress(
                f"  {ticket.id}: default-action control: dev object F1 {f1:.3f} vs best "
                f"{best_f1:.3f} (a control: not sent to the gate)"
            )
            return RunOutcome(
                ticket_id=ticket.id, status="control", device_seconds=seconds, model_ref=str(model)
            )
        word = "dev win" if win else "dev loss"
        self.setup.progress(
            f"  {ticket.id}: dev object F1 {f1:.3f} vs best {best_f1:.3f} -> {word} ({seconds:.0f} device-s)"
        )
        status = "dev_win" if win else "dev_loss"
        return RunOutcome(ticket_id=ticket.id, status=status, device_seconds=seconds, model_ref=str(model))

    def _score_prediction(self, ticket: Ticket, lineage: Lineage, model: Path) -> None:
        parent = self.lineage.parent_of(ticket)
        if parent.sha256 != lineage.parent_sha256:
            parent = self.lineage.incumbent_at(lineage)
        try:
            row = self.predictions().after_ticket(ticket, lineage, model, Path(parent.model))
        except (OSError, DataError, ValueError) as exc:  # scoring a prediction must not lose the ticket
            self.setup.audit_event("prediction_not_scored", {"ticket_id": ticket.id, "reason": str(exc)})
            return
        if row is not None and row.held is not None and row.observed_change is not None:
            effect = ticket.expected_effect
            self.setup.progress(
                f"  {ticket.id}: predicted {effect.metric} on {effect.slice} {effect.direction.value} "
                f"{effect.size:.3f}; measured {row.observed_change:+.3f} -> "
                f"{'held' if row.held else 'did not hold'}"
            )


def metrics_table(candidate: dict[str, float], best: dict[str, float], best_name: str) -> list[str]:
    """Host-computed dev metrics of a ticket next to the current best's, recall by size bin included."""
    keys = [k for k in TABLE_KEYS if k in candidate] + sorted(
        k for k in candidate if k.startswith("recall_size_")
    )
    lines = [f"    {'dev metric':<28}{'ticket':>9}{'best ' + best_name:>22}"]
    for key in keys:
        other = best.get(key)
        shown = f"{other:.3f}" if other is not None else "-"
        lines.append(f"    {key:<28}{candidate[key]:>9.3f}{shown:>22}")
    return lines


__all__ = ["Best", "DevComparer", "metrics_table"]
