"""The real :class:`agents.graph.FactoryServices`: analysis, runner, gate, milestone and report.

``HostServices`` is what ``segfactory run`` plugs into the graph. Everything it computes stays on
the host: the current best's dev analysis and dev score (the confined scorer on the copied
model), the dev comparison that makes a ticket a dev win (the win rule's ``dev_rule``), and the
people-only files under ``runs/<id>/people/``. The graph only ever sees the flag and the coarse
verdict (trust rules 4, 6, 9).

Idempotency (a resumed run calls ``run_ticket`` again for the ticket that was running):
a ticket whose ``outcome.json`` exists is answered from it; a ticket folder without one (a
crash mid-ticket) is moved aside to ``tickets/.crashed/`` and the ticket runs again. The gate
answers a repeated ticket id from its cache; ``promote`` and ``milestone`` check before acting.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.context import DevAnalysis
from agents.graph import RunOutcome
from segfactory.errors import DataError, GateError, SegfactoryError
from segfactory.home import Home
from segfactory.records import Actor, CoarseVerdict, Ticket

log = logging.getLogger(__name__)

BASELINE_MODEL = Path("runs") / "baseline" / "baseline-classical.onnx"  # written by `segfactory init`
PROMOTIONS_FILE = "promotions.jsonl"  # under runs/: every promoted model (host copy), for later runs
MILESTONE_TIERS = ["sealed", "never-queried"]
DEV_COMPARISONS = "dev_comparisons.jsonl"  # people/: candidate vs best on dev, per ticket
TICKETS_FILE = "tickets.jsonl"  # people/: every ticket as it started (the report's kind and replicate_of)


@dataclass
class RunSetup:
    """What the services need, built by the CLI. ``gate`` is a ``gate.client.GateClient``."""

    home: Home
    run_id: str
    backend: str
    dataset: Any  # synthetic.versions.DatasetVersion
    base_config: Path
    gate: Any
    audit: Any  # audit.AuditLog
    dev_margin: float  # policies/win_rule.yaml dev_rule.dev_margin
    progress: Callable[[str], None] = lambda line: None
    scorer: Callable[[Path, np.ndarray], np.ndarray] | None = None  # default: runner.default_scorer


DATASET_FILE = "dataset.json"  # in runs/<id>/topups/<ticket>/: the top-up version a data ticket trained on
TOP_RECOMMENDATIONS = 3  # recommendations printed after each analysis (the demo shows them)
TABLE_KEYS = ("object_f1", "object_recall", "object_precision", "pixel_iou", "dice", "boundary_iou")


def metrics_table(candidate: dict[str, float], best: dict[str, float], best_name: str) -> list[str]:
    """Host-computed dev metrics of a ticket next to the current best's, recall by size bin included."""
    keys = [k for k in TABLE_KEYS if k in candidate] + sorted(k for k in candidate if k.startswith("recall_size_"))
    lines = [f"    {'dev metric':<28}{'ticket':>9}{'best ' + best_name:>22}"]
    for key in keys:
        other = best.get(key)
        shown = f"{other:.3f}" if other is not None else "-"
        lines.append(f"    {key:<28}{candidate[key]:>9.3f}{shown:>22}")
    return lines


@dataclass
class _Best:
    sha256: str
    path: Path
    dev_f1: float
    metrics: dict[str, float] = field(default_factory=dict)  # host-computed dev metrics of the best


@dataclass
class HostServices:
    """``FactoryServices`` over the real runner and gate. ``state_reader`` feeds the report."""

    setup: RunSetup
    report_writer: Callable[[HostServices, str, str], None] | None = None
    state_reader: Callable[[], dict[str, Any]] | None = None
    _best: _Best | None = field(default=None, repr=False)

    # -- helpers ------------------------------------------------------------------------------
    @property
    def home(self) -> Home:
        return self.setup.home

    @property
    def people(self) -> Path:
        path = self.home.people_dir(self.setup.run_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def audit(self, event: str, payload: dict[str, Any]) -> None:
        self.setup.audit.append(Actor.SYSTEM, event, payload, run_id=self.setup.run_id)

    def _score(self, model: Path, images: np.ndarray) -> np.ndarray:
        if self.setup.scorer is not None:
            return self.setup.scorer(model, images)
        from runner import default_scorer

        return default_scorer(model, images)

    def _dev(self) -> Any:
        from synthetic.splits import read_split

        return read_split(self.setup.dataset.dev)

    def best_model(self) -> tuple[str, Path]:
        """The gate's current best (its sha256) and the host's copy of it."""
        sha = self.setup.gate.status().get("current_best")
        if not sha:
            raise GateError("the gate has no current best; `segfactory init` registers the baseline")
        for candidate in self._known_models():
            if candidate.is_file() and _sha256(candidate) == sha:
                return str(sha), candidate
        raise DataError(f"the current best {sha[:12]}… has no host copy (baseline or {PROMOTIONS_FILE}); "
                        "re-run `segfactory init` on a fresh home or restore runs/")

    def _known_models(self) -> list[Path]:
        paths = []
        promotions = self.home.runs / PROMOTIONS_FILE
        if promotions.is_file():
            paths = [Path(json.loads(line)["model"]) for line in promotions.read_text().splitlines() if line]
        return [*reversed(paths), self.home.root / BASELINE_MODEL]

    def best(self) -> _Best:
        """The current best with its host-computed dev object F1 (recomputed when the best moves)."""
        sha, path = self.best_model()
        if self._best is None or self._best.sha256 != sha:
            from vision.metrics import aggregate, per_image_metrics

            dev = self._dev()
            prob = np.asarray(self._score(path, dev.images))[:, 0]
            metrics = {k: float(v) for k, v in aggregate(per_image_metrics(prob, dev.masks, threshold=0.5)).items()}
            self._best = _Best(sha, path, metrics["object_f1"], metrics)
        return self._best

    # -- FactoryServices ----------------------------------------------------------------------
    def analyse(self) -> DevAnalysis:
        from agents._analysis import analyse_best

        best = self.best()
        self.setup.progress(f"analysing the current best {best.sha256[:12]} on dev (object F1 {best.dev_f1:.3f})")
        report = analyse_best(self, best.path, best.sha256)
        from analysis.report import summary_lines

        for n, line in enumerate(summary_lines(report, TOP_RECOMMENDATIONS), 1):
            self.setup.progress(f"  recommendation {n}: {line}")
        self.audit("analysis_done", {"model_sha256": best.sha256, "recommendations": len(report.recommendations)})
        return DevAnalysis.from_report(report)

    def run_ticket(self, ticket: Ticket) -> RunOutcome:
        from runner import TicketOutcome, TicketStatus

        folder = self.home.tickets_dir(self.setup.run_id) / ticket.id
        done = folder / "outcome.json"
        if done.is_file():  # a resumed run: this ticket finished before the crash
            outcome = TicketOutcome.model_validate_json(done.read_text())
        else:
            if folder.exists():
                self._set_aside(folder)
            self.setup.progress(f"ticket {ticket.id} ({ticket.kind.value}): {ticket.hypothesis[:70]}")
            with (self.people / TICKETS_FILE).open("a") as fh:  # for the report: kind, replicate_of, budget
                fh.write(ticket.model_dump_json() + "\n")
            try:
                outcome = self._execute(ticket)
            except SegfactoryError as exc:  # e.g. a slice the generator cannot target: a recorded failure
                self.audit("ticket_failed", {"ticket_id": ticket.id, "reason": str(exc)})
                self.setup.progress(f"  {ticket.id}: failed: {exc}")
                return RunOutcome(ticket_id=ticket.id, status="failed", device_seconds=0.0, reason=str(exc))
        if outcome.status is not TicketStatus.DONE or outcome.evidence is None:
            self.setup.progress(f"  {ticket.id}: {outcome.status.value.lower()}: {(outcome.reason or '')[:120]}")
            return RunOutcome(ticket_id=ticket.id, status="failed", device_seconds=outcome.device_seconds,
                              reason=outcome.reason or outcome.status.value)
        return self._compare(ticket, outcome.evidence.dev_metrics, outcome.device_seconds, folder / "model.onnx")

    def _set_aside(self, folder: Path) -> None:
        aside = folder.parent / ".crashed" / f"{folder.name}-{int(time.time())}"
        aside.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(aside)
        self.audit("ticket_set_aside", {"ticket_id": folder.name, "moved_to": str(aside),
                                        "reason": "folder without outcome.json: the run crashed mid-ticket"})

    def _execute(self, ticket: Ticket) -> Any:
        from runner import execute_ticket

        s = self.setup
        return execute_ticket(ticket, home=s.home, dataset_version=self.dataset_for(ticket), backend=s.backend,
                              base_config=s.base_config, audit=s.audit, run_id=s.run_id, scorer=self._score)

    def dataset_for(self, ticket: Ticket) -> Any:
        """The dataset version a ticket trains on: the run's, or a targeted top-up of it (data tickets).

        The choice is recorded in the ticket folder, so a replicate or a resumed run reuses it.
        """
        from agents._data_tickets import materialise, topup_spec
        from synthetic.versions import resolve

        key = ticket.replicate_of or ticket.id
        work = self.home.runs / self.setup.run_id / "topups" / key
        record = work / DATASET_FILE
        if record.is_file():
            return resolve(self.home.root, json.loads(record.read_text())["dataset"])
        if topup_spec(ticket) is None:
            return self.setup.dataset
        version = materialise(self.home.root, self.setup.dataset, ticket, work)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"dataset": version.ref, "parent": self.setup.dataset.ref}) + "\n")
        self.audit("topup_dataset_built", {"ticket_id": ticket.id, "dataset": version.ref,
                                           "parent": self.setup.dataset.ref, "change": ticket.change})
        self.setup.progress(f"  {ticket.id}: trains on {version.ref} (targeted synthetic top-up of "
                            f"{self.setup.dataset.ref})")
        return version

    def _compare(self, ticket: Ticket, metrics: dict[str, float], seconds: float, model: Path) -> RunOutcome:
        best = self.best()
        f1 = float(metrics["object_f1"])
        win = f1 - best.dev_f1 >= self.setup.dev_margin
        row = {"ticket_id": ticket.id, "object_f1": f1, "best_object_f1": best.dev_f1, "best_sha256": best.sha256,
               "dev_margin": self.setup.dev_margin, "dev_win": win, "metrics": metrics}
        with (self.people / DEV_COMPARISONS).open("a") as fh:  # people only: never in an agent's context
            fh.write(json.dumps(row, sort_keys=True) + "\n")
        name = "classical" if best.path == self.home.root / BASELINE_MODEL else best.sha256[:12]
        for line in metrics_table(metrics, best.metrics, name):
            self.setup.progress(line)
        word = "dev win" if win else "dev loss"
        self.setup.progress(f"  {ticket.id}: dev object F1 {f1:.3f} vs best {best.dev_f1:.3f} -> {word} "
                            f"({seconds:.0f} device-s)")
        return RunOutcome(ticket_id=ticket.id, status="dev_win" if win else "dev_loss", device_seconds=seconds,
                          model_ref=str(model))

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        from audit.gate_events import pull

        s = self.setup
        verdict: CoarseVerdict = s.gate.submit(model_ref, self.dataset_for(ticket).ref, ticket.id, replicate_of=replicate_of,
                                               run_id=s.run_id)
        pull(s.gate, s.audit)
        self.setup.progress(f"  {ticket.id}: {verdict.tier} {verdict.verdict.value} "
                            f"({verdict.queries_left} queries left)")
        return verdict

    def promote(self, ticket_id: str) -> None:
        """Ask the gate to promote: it checks its own ledger for the confirm-a WIN and the replicate WIN.

        Idempotent: the gate answers a repeated promotion with the same best, and the host records
        its copy of the model once.
        """
        from audit.gate_events import pull

        model = self.home.tickets_dir(self.setup.run_id) / ticket_id / "model.onnx"
        sha = _sha256(model)
        record = self.home.runs / PROMOTIONS_FILE
        already = record.is_file() and any(json.loads(line).get("sha256") == sha
                                           for line in record.read_text().splitlines() if line.strip())
        promoted = self.setup.gate.promote(ticket_id)
        if promoted != sha:
            raise GateError(f"gate promoted model {promoted[:12]} for {ticket_id}, but the host copy is {sha[:12]}")
        if not already:
            with record.open("a") as fh:
                fh.write(json.dumps({"model": str(model), "sha256": sha, "run_id": self.setup.run_id,
                                     "ticket_id": ticket_id}) + "\n")
            self.audit("best_promoted", {"ticket_id": ticket_id, "model_sha256": sha})
            self.setup.progress(f"  {ticket_id}: PROMOTED, the new current best is {sha[:12]}")
        pull(self.setup.gate, self.setup.audit)

    def milestone(self, run_id: str) -> None:
        out = self.people / "milestones"
        name = f"{run_id}-final"
        target = out / f"{name}.json"
        if target.is_file():
            return
        out.mkdir(parents=True, exist_ok=True)
        best = self.best()
        models = [best.path]
        baseline = self.home.root / BASELINE_MODEL
        if baseline.is_file() and baseline != best.path:
            models.insert(0, baseline)
        self.setup.progress(f"milestone {name}: scoring {len(models)} model(s) on {', '.join(MILESTONE_TIERS)}")
        try:
            report = self.setup.gate.milestone(name, run_id, models, MILESTONE_TIERS)
        except GateError as exc:  # quota spent, say: the run still ends with its report
            report = {"name": name, "run_id": run_id, "error": str(exc)}
        report["models"] = {_sha256(m): str(m) for m in models}
        report["best_sha256"] = best.sha256
        target.write_text(json.dumps(report, indent=2, sort_keys=True))
        from audit.gate_events import pull

        pull(self.setup.gate, self.setup.audit)
        self.audit("milestone_written", {"name": name, "file": str(target), "error": report.get("error")})

    def report(self, run_id: str, stop_reason: str) -> None:
        if self.report_writer is not None:
            self.report_writer(self, run_id, stop_reason)


def _sha256(path: Path) -> str:
    from synthetic.splits import sha256_file

    return str(sha256_file(path))


__all__ = ["BASELINE_MODEL", "DEV_COMPARISONS", "TICKETS_FILE", "PROMOTIONS_FILE", "HostServices", "RunSetup"]
