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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agents import _realise
from agents._analysis import analyse_best
from agents._data_tickets import materialise, topup_spec
from agents._predictions import Predictions
from agents.actions import load_catalogue
from agents.context import DevAnalysis
from agents.graph import RunOutcome
from agents.incumbent import (
    DEFAULT_ACTION_EVIDENCE,
    LINEAGE_FILE,
    Incumbent,
    Lineage,
    fingerprint,
    read_lineage,
    repeat_kind,
    same_as_parent,
)
from analysis.report import summary_lines
from audit.gate_events import pull
from runner import TicketOutcome, TicketRunner, TicketStatus, default_scorer
from runner._policy import code_files
from runner._workspace import ticket_config
from runner.scheduler import Scheduler, SchedulerSettings
from segfactory.errors import DataError, GateError, SegfactoryError, UsageError
from segfactory.files import append_jsonl, read_jsonl, write_atomic
from segfactory.home import Home
from segfactory.records import Actor, CoarseVerdict, Ticket, TicketKind, canonical_json, sha256_file
from synthetic.splits import appended_images, read_split
from synthetic.versions import resolve
from vision.config import parse_config
from vision.metrics import aggregate, per_image_metrics

log = logging.getLogger(__name__)

BASELINE_MODEL = Path("runs") / "baseline" / "baseline-classical.onnx"  # written by `segfactory init`
PROMOTIONS_FILE = "promotions.jsonl"  # under runs/: every promoted model (host copy), for later runs
MILESTONE_TIERS = ["sealed", "never-queried"]
MILESTONE_CHAIN_MODELS = 3  # extra sealed scores per run for the promoted predictions (sealed quota: 5)
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
    threshold: float = 0.5  # policies/win_rule.yaml threshold: dev scores of candidate and best both use it
    max_epochs: int = 10  # policies/budgets.yaml per-ticket epoch cap (an epochs action stays within it)
    refuse_repeats: bool = True  # refuse a ticket that trains exactly its parent's inputs
    concurrency: int = 1  # tickets the run's one scheduler lets train at once (run --concurrency)


DATASET_FILE = "dataset.json"  # in runs/<id>/topups/<ticket>/: the top-up version a data ticket trained on
TOP_RECOMMENDATIONS = 3  # recommendations printed after each analysis (the demo shows them)
TABLE_KEYS = ("object_f1", "object_recall", "object_precision", "pixel_iou", "dice", "boundary_iou")


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
    _predictions: Predictions | None = field(default=None, repr=False)
    _catalogue: Any = field(default=None, repr=False)
    _scheduler: Any = field(default=None, repr=False)  # one runner.Scheduler for the whole run
    # Held by every step of run_ticket except the sandboxed training (tickets train concurrently).
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # -- helpers ------------------------------------------------------------------------------
    @property
    def home(self) -> Home:
        return self.setup.home

    @property
    def people(self) -> Path:
        path = self.home.people_dir(self.setup.run_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scheduler(self) -> Any:
        """The run's one ``runner.Scheduler``: every ticket of the run is admitted by it, so that
        concurrent tickets share its memory accounting and split the CPU between them."""
        with self._lock:
            if self._scheduler is None:
                self._scheduler = Scheduler.for_home(
                    self.home, SchedulerSettings(concurrency=self.setup.concurrency)
                )
            return self._scheduler

    def audit(self, event: str, payload: dict[str, Any]) -> None:
        self.setup.audit.append(Actor.SYSTEM, event, payload, run_id=self.setup.run_id)

    def _score(self, model: Path, images: np.ndarray) -> np.ndarray:
        if self.setup.scorer is not None:
            return self.setup.scorer(model, images)

        return default_scorer(model, images)

    def _dev(self) -> Any:
        return read_split(self.setup.dataset.dev)

    def best_model(self) -> tuple[str, Path]:
        """The gate's current best (its sha256) and the host's copy of it."""
        sha = self.setup.gate.status().current_best
        if not sha:
            raise GateError("the gate has no current best; `segfactory init` registers the baseline")
        for candidate in self._known_models():
            if candidate.is_file() and sha256_file(candidate) == sha:
                return str(sha), candidate
        raise DataError(
            f"the current best {sha[:12]}… has no host copy (baseline or {PROMOTIONS_FILE}); "
            "re-run `segfactory init` on a fresh home or restore runs/"
        )

    def _known_models(self) -> list[Path]:
        paths = []
        promotions = self.home.runs / PROMOTIONS_FILE
        if promotions.is_file():
            paths = [Path(json.loads(line)["model"]) for line in promotions.read_text().splitlines() if line]
        return [*reversed(paths), self.home.root / BASELINE_MODEL]

    def best(self) -> _Best:
        """The current best with its host-computed dev metrics (recomputed when the best moves).

        Scored at the win rule's threshold, the same one every candidate is scored at: a ticket
        cannot move its own threshold past the dev rule.
        """
        sha, path = self.best_model()
        if self._best is None or self._best.sha256 != sha:
            self._best = _Best(sha, path, 0.0)
            metrics = self._dev_metrics(path)
            self._best = _Best(sha, path, metrics["object_f1"], metrics)
        return self._best

    def _dev_metrics(self, model: Path) -> dict[str, float]:
        dev = self._dev()
        prob = np.asarray(self._score(model, dev.images))[:, 0]
        return {
            k: float(v)
            for k, v in aggregate(per_image_metrics(prob, dev.masks, threshold=self.setup.threshold)).items()
        }

    # -- the incumbent ------------------------------------------------------------------------
    def base_config(self) -> dict[str, Any]:
        """The run's base training config, validated and with every default filled in (as a
        ticket's patched config is), so that the two compare key by key."""

        data = yaml.safe_load(Path(self.setup.base_config).read_text())
        return parse_config(data, str(self.setup.base_config)).model_dump(mode="json")

    def incumbent(self) -> Incumbent:
        """What the next ticket patches: the current best's config, data and code.

        The classical baseline (or a best promoted before lineage was recorded) has no training
        config of its own: tickets then patch the run's base config on the run's dataset.
        """
        sha, path = self.best_model()
        for row in reversed(read_jsonl(self.home.runs / PROMOTIONS_FILE)):
            if row.get("sha256") == sha and row.get("config"):
                return Incumbent(
                    sha256=sha,
                    model=str(path),
                    config=row["config"],
                    dataset=row["dataset"],
                    dataset_hash=row.get("dataset_hash", ""),
                    code=row.get("code") or {},
                    fingerprint=row.get("fingerprint", ""),
                    ticket_id=row.get("ticket_id"),
                    run_id=row.get("run_id"),
                )
        dataset = self.setup.dataset
        return Incumbent(
            sha256=sha,
            model=str(path),
            config=self.base_config(),
            dataset=dataset.ref,
            dataset_hash=getattr(dataset, "content_hash", ""),
        )

    def lineage(self) -> dict[str, Lineage]:
        return read_lineage(self.home.runs / self.setup.run_id)

    def _parent_of(self, ticket: Ticket) -> Incumbent:
        """A replicate builds on what its original built on; every other ticket on the incumbent."""
        if ticket.replicate_of is not None:
            original = self.lineage().get(ticket.replicate_of)
            if original is not None:
                return self._incumbent_at(original)
        return self.incumbent()

    def _incumbent_at(self, row: Lineage) -> Incumbent:
        current = self.incumbent()
        if current.sha256 == row.parent_sha256:
            return current
        for promo in read_jsonl(self.home.runs / PROMOTIONS_FILE):
            if promo.get("sha256") == row.parent_sha256 and promo.get("config"):
                return Incumbent(
                    sha256=promo["sha256"],
                    model=promo["model"],
                    config=promo["config"],
                    dataset=promo["dataset"],
                    dataset_hash=promo.get("dataset_hash", ""),
                    code=promo.get("code") or {},
                    fingerprint=promo.get("fingerprint", ""),
                    ticket_id=promo.get("ticket_id"),
                    run_id=promo.get("run_id"),
                )
        return current

    def plan(self, ticket: Ticket) -> Lineage:
        """What ``ticket`` would train: its patched config, data version, code and fingerprint."""

        parent = self._parent_of(ticket)
        dataset = self.dataset_for(ticket, parent)
        config = ticket_config(_base_config(parent, dataset), self._runnable(ticket, parent))
        code = {**parent.code, **_code_files(ticket)}
        return Lineage(
            ticket_id=ticket.id,
            run_id=self.setup.run_id,
            parent_sha256=parent.sha256,
            parent_fingerprint=parent.fingerprint,
            config=config,
            dataset=dataset.ref,
            dataset_hash=dataset.content_hash,
            code=code,
            fingerprint=fingerprint(config, dataset.content_hash, code),
            repeat=repeat_kind(ticket),
        )

    def check(self, ticket: Ticket) -> list[str]:
        """Host-side refusals before a ticket is queued: one that would train its parent again."""
        if not self.setup.refuse_repeats or ticket.kind is TicketKind.DATA_REQUEST:
            return []
        try:
            reason = same_as_parent(self.plan(ticket))
        except SegfactoryError as exc:
            return [str(exc)]
        return [reason] if reason else []

    def _runnable(self, ticket: Ticket, parent: Incumbent) -> Ticket:
        """The ticket as the runner executes it: on a code incumbent, its code overlay comes along."""
        if not parent.code or ticket.kind is TicketKind.CODE:
            if ticket.kind is TicketKind.CODE and parent.code:
                return ticket.model_copy(
                    update={"change": {**ticket.change, "files": {**parent.code, **_code_files(ticket)}}}
                )
            return ticket
        patch = (
            dict(ticket.change) if ticket.kind is TicketKind.CONFIG else dict(ticket.change.get("config", {}))
        )
        return ticket.model_copy(
            update={"kind": TicketKind.CODE, "change": {"files": dict(parent.code), "config": patch}}
        )

    # -- realising recommendations ------------------------------------------------------------
    def catalogue(self) -> Any:
        if self._catalogue is None:
            self._catalogue = load_catalogue()
        return self._catalogue

    def realise(self, analysis: DevAnalysis) -> DevAnalysis:
        """The analysis with each recommendation as a concrete change of the incumbent; the rest
        are recorded as not executable (``people/not_executable.jsonl`` and the audit log)."""
        incumbent = self.incumbent()
        on_it = {tid for tid, row in self.lineage().items() if row.parent_sha256 == incumbent.sha256}
        tried = {
            canonical_json(t["change"]).decode()
            for t in read_jsonl(self.people / TICKETS_FILE)
            if t.get("id") in on_it
        }
        realised, refused = _realise.realise_all(self, analysis.recommendations, incumbent, tried)
        for item in refused:
            self._not_executable(item)
        return analysis.model_copy(update={"recommendations": tuple(realised)})

    def _not_executable(self, item: Any) -> None:
        path = self.people / _realise.NOT_EXECUTABLE_FILE
        key = (item.recommendation_id, item.reason)
        if any((r.get("recommendation_id"), r.get("reason")) == key for r in read_jsonl(path)):
            return
        append_jsonl(path, {**item.model_dump(mode="json"), "incumbent": self.incumbent().sha256})
        self.audit("recommendation_not_executable", item.model_dump(mode="json"))
        self.setup.progress(f"  recommendation {item.recommendation_id}: not executable: {item.reason[:160]}")

    # -- FactoryServices ----------------------------------------------------------------------
    def analyse(self) -> DevAnalysis:
        best = self.best()
        self.setup.progress(
            f"analysing the current best {best.sha256[:12]} on dev (object F1 {best.dev_f1:.3f})"
        )
        report = analyse_best(self, best.path, best.sha256)

        for n, line in enumerate(summary_lines(report, TOP_RECOMMENDATIONS), 1):
            self.setup.progress(f"  recommendation {n}: {line}")
        self.audit(
            "analysis_done", {"model_sha256": best.sha256, "recommendations": len(report.recommendations)}
        )
        return DevAnalysis.from_report(report)

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        """Train ``ticket`` in the sandbox and compare it with the current best on dev.

        Safe to call from several threads at once (the loop trains up to the scheduler's
        concurrency together): only the sandboxed training runs unlocked; planning, the people's
        files, the dev comparison and the prediction scoring take the services' lock in turn."""

        folder = self.home.tickets_dir(self.setup.run_id) / ticket.id
        done = folder / "outcome.json"
        with self._lock:
            lineage = self.lineage().get(ticket.id)
            resumed = done.is_file()
            if resumed:  # a resumed run: this ticket finished before the crash
                outcome = TicketOutcome.model_validate_json(done.read_text())
                lineage = lineage or self.plan(ticket)
            else:
                if folder.exists():
                    self._set_aside(folder)
                self.setup.progress(f"ticket {ticket.id} ({ticket.kind.value}): {ticket.hypothesis[:70]}")
                with (self.people / TICKETS_FILE).open(
                    "a"
                ) as fh:  # for the report: kind, replicate_of, budget
                    fh.write(ticket.model_dump_json() + "\n")
                try:
                    lineage = self._start(ticket)
                    parent = self._parent_of(ticket)
                    runnable = self._runnable(ticket, parent)
                except SegfactoryError as exc:  # e.g. a slice the generator cannot target: a recorded failure
                    return self._failed_to_start(ticket, exc)
        if not resumed:
            try:
                outcome = self._execute(runnable, parent, lineage, wall_left_s)
            except SegfactoryError as exc:
                with self._lock:
                    return self._failed_to_start(ticket, exc)
        with self._lock:
            if outcome.status is not TicketStatus.DONE or outcome.evidence is None:
                self.setup.progress(
                    f"  {ticket.id}: {outcome.status.value.lower()}: {(outcome.reason or '')[:120]}"
                )
                return RunOutcome(
                    ticket_id=ticket.id,
                    status="failed",
                    device_seconds=outcome.device_seconds,
                    reason=outcome.reason or outcome.status.value,
                )
            metrics = outcome.evidence.dev_metrics
            if (
                abs(outcome.evidence.threshold - self.setup.threshold) > 1e-12
            ):  # the rule's threshold, for both
                metrics = self._dev_metrics(folder / "model.onnx")
            return self._compare(ticket, lineage, metrics, outcome.device_seconds, folder / "model.onnx")

    def _failed_to_start(self, ticket: Ticket, exc: SegfactoryError) -> RunOutcome:
        self.audit("ticket_failed", {"ticket_id": ticket.id, "reason": str(exc)})
        self.setup.progress(f"  {ticket.id}: failed: {exc}")
        return RunOutcome(ticket_id=ticket.id, status="failed", device_seconds=0.0, reason=str(exc))

    def _start(self, ticket: Ticket) -> Lineage:
        """Plan the ticket, refuse a repeat of its parent, and record its lineage before it trains."""
        row = self.plan(ticket)
        reason = same_as_parent(row) if self.setup.refuse_repeats else None
        if reason:
            self.audit(
                "ticket_refused_repeat",
                {"ticket_id": ticket.id, "fingerprint": row.fingerprint, "parent_sha256": row.parent_sha256},
            )
            raise UsageError(reason)
        existing = self.lineage().get(ticket.id)
        if existing is None:
            append_jsonl(self.home.runs / self.setup.run_id / LINEAGE_FILE, row.model_dump(mode="json"))
        return existing or row

    def _set_aside(self, folder: Path) -> None:
        aside = folder.parent / ".crashed" / f"{folder.name}-{int(time.time())}"
        aside.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(aside)
        self.audit(
            "ticket_set_aside",
            {
                "ticket_id": folder.name,
                "moved_to": str(aside),
                "reason": "folder without outcome.json: the run crashed mid-ticket",
            },
        )

    def _runner(self, caps: Any = None) -> Any:
        """The run's ``runner.TicketRunner`` (``caps``: ticket caps other than the profile's)."""

        s = self.setup
        return TicketRunner(
            s.home,
            s.backend,
            s.audit,
            run_id=s.run_id,
            scheduler=self.scheduler(),
            scorer=self._score,
            budget_policy=caps,
            progress=s.progress,
        )

    def _execute(
        self, runnable: Ticket, parent: Incumbent, lineage: Lineage, wall_left_s: float | None = None
    ) -> Any:
        """The ticket (patched onto ``parent`` by ``_runnable``) in the sandbox; runs unlocked."""

        dataset = resolve(self.setup.home.root, lineage.dataset)
        return self._runner().run(runnable, dataset, _base_config(parent, dataset), wall_left_s=wall_left_s)

    def dataset_for(self, ticket: Ticket, parent: Incumbent | None = None) -> Any:
        """The dataset version a ticket trains on: the incumbent's, a version the ticket names
        (curation, reviewed labels, approved data), or a targeted top-up of the incumbent's.

        The choice is recorded beside the run, so a replicate or a resumed run reuses it.
        """

        key = ticket.replicate_of or ticket.id
        work = self.home.runs / self.setup.run_id / "topups" / key
        record = work / DATASET_FILE
        if record.is_file():
            return resolve(self.home.root, json.loads(record.read_text())["dataset"])
        parent = parent or self._parent_of(ticket)
        base = resolve(self.home.root, parent.dataset)
        trained = parent.config.get("max_train_images")  # the parent's first N images; None: all of them
        named = _realise.named_dataset(self, ticket, base, trained)
        if named is not None:
            return named
        if topup_spec(ticket) is None:
            return base
        version = materialise(self.home.root, base, ticket, work, trained)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"dataset": version.ref, "parent": base.ref}) + "\n")
        self.audit(
            "topup_dataset_built",
            {"ticket_id": ticket.id, "dataset": version.ref, "parent": base.ref, "change": ticket.change},
        )
        self.setup.progress(
            f"  {ticket.id}: trains on {version.ref} (targeted synthetic top-up of {base.ref})"
        )
        return version

    def _compare(
        self, ticket: Ticket, lineage: Lineage, metrics: dict[str, float], seconds: float, model: Path
    ) -> RunOutcome:
        best = self.best()
        f1 = float(metrics["object_f1"])
        win = f1 - best.dev_f1 >= self.setup.dev_margin
        row = {
            "ticket_id": ticket.id,
            "object_f1": f1,
            "best_object_f1": best.dev_f1,
            "best_sha256": best.sha256,
            "dev_margin": self.setup.dev_margin,
            "dev_win": win,
            "metrics": metrics,
            "threshold": self.setup.threshold,
            "parent_sha256": lineage.parent_sha256,
        }
        with (self.people / DEV_COMPARISONS).open("a") as fh:  # people only: never in an agent's context
            fh.write(json.dumps(row, sort_keys=True) + "\n")
        name = "classical" if best.path == self.home.root / BASELINE_MODEL else best.sha256[:12]
        for line in metrics_table(metrics, best.metrics, name):
            self.setup.progress(line)
        if model.is_file():
            self._score_prediction(ticket, lineage, model)
        if ticket.evidence == [DEFAULT_ACTION_EVIDENCE]:
            self.setup.progress(
                f"  {ticket.id}: default-action control: dev object F1 {f1:.3f} vs best "
                f"{best.dev_f1:.3f} (a control: not sent to the gate)"
            )
            return RunOutcome(
                ticket_id=ticket.id, status="control", device_seconds=seconds, model_ref=str(model)
            )
        word = "dev win" if win else "dev loss"
        self.setup.progress(
            f"  {ticket.id}: dev object F1 {f1:.3f} vs best {best.dev_f1:.3f} -> {word} "
            f"({seconds:.0f} device-s)"
        )
        return RunOutcome(
            ticket_id=ticket.id,
            status="dev_win" if win else "dev_loss",
            device_seconds=seconds,
            model_ref=str(model),
        )

    def predictions(self) -> Predictions:
        if self._predictions is None:
            self._predictions = Predictions(
                self.home, self.setup.run_id, self._dev(), self.setup.threshold, self._score
            )
        return self._predictions

    def _score_prediction(self, ticket: Ticket, lineage: Lineage, model: Path) -> None:
        parent = self._parent_of(ticket)
        if parent.sha256 != lineage.parent_sha256:
            parent = self._incumbent_at(lineage)
        try:
            row = self.predictions().after_ticket(ticket, lineage, model, Path(parent.model))
        except (OSError, DataError, ValueError) as exc:  # scoring a prediction must not lose the ticket
            self.audit("prediction_not_scored", {"ticket_id": ticket.id, "reason": str(exc)})
            return
        if row is not None and row.get("held") is not None:
            effect = ticket.expected_effect
            self.setup.progress(
                f"  {ticket.id}: predicted {effect.metric} on {effect.slice} {effect.direction.value} "
                f"{effect.size:.3f}; measured {row['observed_change']:+.3f} -> "
                f"{'held' if row['held'] else 'did not hold'}"
            )

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        s = self.setup
        verdict: CoarseVerdict = s.gate.submit(
            model_ref, self.dataset_for(ticket).ref, ticket.id, replicate_of=replicate_of, run_id=s.run_id
        )
        pull(s.gate, s.audit)
        self.setup.progress(
            f"  {ticket.id}: {verdict.tier} {verdict.verdict.value} ({verdict.queries_left} queries left)"
        )
        return verdict

    def promote(self, ticket_id: str) -> None:
        """Ask the gate to promote: it checks its own ledger for the confirm-a WIN and the replicate WIN.

        The promotion record carries the ticket's lineage (config, data version, code), so the
        next ticket builds on it. Idempotent: the gate answers a repeated promotion with the same
        best, and the host records its copy of the model once.
        """

        model = self.home.tickets_dir(self.setup.run_id) / ticket_id / "model.onnx"
        sha = sha256_file(model)
        record = self.home.runs / PROMOTIONS_FILE
        already = any(row.get("sha256") == sha for row in read_jsonl(record))
        promoted = self.setup.gate.promote(ticket_id)
        if promoted != sha:
            raise GateError(
                f"gate promoted model {promoted[:12]} for {ticket_id}, but the host copy is {sha[:12]}"
            )
        if not already:
            lineage = self.lineage().get(ticket_id)
            extra = (
                {}
                if lineage is None
                else {
                    "config": lineage.config,
                    "dataset": lineage.dataset,
                    "dataset_hash": lineage.dataset_hash,
                    "code": lineage.code,
                    "fingerprint": lineage.fingerprint,
                    "parent_sha256": lineage.parent_sha256,
                }
            )
            append_jsonl(
                record,
                {
                    "model": str(model),
                    "sha256": sha,
                    "run_id": self.setup.run_id,
                    "ticket_id": ticket_id,
                    **extra,
                },
            )
            self.audit("best_promoted", {"ticket_id": ticket_id, "model_sha256": sha})
            self.setup.progress(f"  {ticket_id}: PROMOTED, the new current best is {sha[:12]}")
        pull(self.setup.gate, self.setup.audit)

    def _promoted_in_run(self) -> list[dict[str, Any]]:
        return [
            r for r in read_jsonl(self.home.runs / PROMOTIONS_FILE) if r.get("run_id") == self.setup.run_id
        ]

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
        report = self._milestone(name, models, MILESTONE_TIERS)
        report["best_sha256"] = best.sha256
        _write_json(target, report)
        if "error" not in report:
            self.predictions().sealed(self._promoted_in_run(), self._with_chain(run_id, report, models))

        pull(self.setup.gate, self.setup.audit)
        self.audit("milestone_written", {"name": name, "file": str(target), "error": report.get("error")})

    def _milestone(self, name: str, models: list[Path], tiers: list[str]) -> dict[str, Any]:
        """The people's milestone file: the gate's report (or its refusal) and the models by sha256."""
        self.setup.progress(f"milestone {name}: scoring {len(models)} model(s) on {', '.join(tiers)}")
        try:
            report = self.setup.gate.milestone(name, self.setup.run_id, models, tiers).as_json()
        except GateError as exc:  # quota spent, say: the run still ends with its report
            report = {"name": name, "run_id": self.setup.run_id, "error": str(exc)}
        report["models"] = {sha256_file(m): str(m) for m in models}
        return report

    def _with_chain(self, run_id: str, final: dict[str, Any], scored: list[Path]) -> dict[str, Any]:
        """Sealed scores of every promotion of this run and its parent, for the promoted predictions:
        the final milestone's, plus a sealed-only milestone for the models it did not score."""
        known = {r["sha256"]: Path(r["model"]) for r in read_jsonl(self.home.runs / PROMOTIONS_FILE)}
        known[sha256_file(self.home.root / BASELINE_MODEL)] = self.home.root / BASELINE_MODEL
        wanted: list[Path] = []
        for promo in self._promoted_in_run():
            for path in (known.get(promo.get("parent_sha256", "")), Path(promo["model"])):
                if path is not None and path.is_file() and path not in scored and path not in wanted:
                    wanted.append(path)
        if not wanted:
            return final
        chain = self._milestone(f"{run_id}-chain", wanted[:MILESTONE_CHAIN_MODELS], ["sealed"])
        _write_json(self.people / "milestones" / f"{run_id}-chain.json", chain)
        merged = json.loads(json.dumps(final))
        sealed = merged.setdefault("tiers", {}).setdefault("sealed", {}).setdefault("models", {})
        sealed.update((chain.get("tiers", {}).get("sealed", {}) or {}).get("models", {}))
        return merged

    def report(self, run_id: str, stop_reason: str) -> None:
        if self.report_writer is not None:
            self.report_writer(self, run_id, stop_reason)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str))


def _base_config(parent: Incumbent, dataset: Any) -> dict[str, Any]:
    """The config a ticket patches: its parent's, with the training cap lifted on a version that
    adds images to those the parent trained on (a top-up, approved data). Such a version holds
    the parent's first ``max_train_images`` images and then the added ones, which the cap would
    cut: the ticket would silently train its parent's images again (the runner refuses that)."""

    added, _ = appended_images(dataset.train)
    if added and parent.config.get("max_train_images") is not None:
        return {**parent.config, "max_train_images": None}
    return parent.config


def _code_files(ticket: Ticket) -> dict[str, str]:
    if ticket.kind is not TicketKind.CODE:
        return {}

    return dict(code_files(ticket))


__all__ = ["BASELINE_MODEL", "DEV_COMPARISONS", "TICKETS_FILE", "PROMOTIONS_FILE", "HostServices", "RunSetup"]
