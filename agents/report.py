"""The morning report of a run: ``runs/<id>/people/report.md`` and ``report.html`` (people only).

The run's end (``agents._run_loop``) gathers a ``RunReport`` from what the host recorded: the
graph's final state (history of coarse verdicts, the judge's decisions, budget counters), each
ticket's ``outcome.json`` (the runner's host-computed evidence) and lineage row,
``people/dev_comparisons.jsonl``, ``runs/promotions.jsonl``, the milestones under
``people/milestones/``, the approvals queue, the audit log (verified against the gate's anchor)
and the LLM usage. ``write(report, people_dir)`` renders Markdown, HTML and plots from that record
alone. Nothing here ever goes back into an agent's context (trust rule 9).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from agents._report_headline import headline, read_milestone
from agents._report_html import render_html
from agents._report_md import render_markdown
from agents._report_plots import PLOTS_DIR, copy_analysis_plots, curves_plot, dev_plot
from agents._report_records import (
    MAX_RUN_FINDINGS,
    ApprovalRow,
    AuditSummary,
    Headline,
    LabelRoundRow,
    PlanSpend,
    QueuedTicket,
    RefusedDraft,
    RetractionRow,
    RoundRow,
    RunReport,
    SealedScore,
    TicketRow,
    TriedFix,
)
from agents.approvals import ApprovalQueue
from agents.budget_plan import ProfilePlan
from agents.challenge import retractions
from agents.labelling import label_rounds
from agents.state import FactoryState
from audit import check_records, iter_records, load_policy, verify_log
from runner import TicketOutcome
from segfactory.files import write_atomic
from segfactory.home import Home
from segfactory.layout import DevPrediction, Promotion, RunLayout

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
REPORT_JSON = "report.json"
WEAKNESSES_SHOWN = 3  # a round names the first this many recommendations of its analysis


class HomeRecords(TypedDict):
    """What every later report of a home lists beside its run (``RunReport``'s fields of these names)."""

    label_rounds: list[LabelRoundRow]
    retractions: list[RetractionRow]


def home_records(home: Home) -> HomeRecords:
    """The home's labelling rounds and retracted claims, as every later report lists them."""

    rounds = [
        LabelRoundRow(
            round=r.round,
            reviewed=r.reviewed,
            kept=r.kept,
            fixed=r.fixed,
            dropped=r.dropped,
            precision=r.precision,
            human_minutes_per_image=r.human_minutes_per_image,
            labels_per_hour=r.labels_per_hour,
            dev_object_f1=r.dev_object_f1,
            dev_gain=r.dev_gain,
            gate_verdict=r.gate_verdict,
            status=r.status,
        )
        for r in label_rounds(home)
    ]
    retracted = [
        RetractionRow(
            challenge_id=c.challenge_id,
            ticket_id=c.claim.ticket_id,
            run_id=c.claim.run_id,
            claim=c.claim.kind.value,
            reason=c.reasons[0] if c.reasons else "",
            demoted=c.demoted,
        )
        for c in retractions(home)
    ]
    return {"label_rounds": rounds, "retractions": retracted}


def _outcome(layout: RunLayout, ticket_id: str) -> TicketOutcome | None:
    path = layout.ticket(ticket_id).outcome
    return TicketOutcome.model_validate_json(path.read_text()) if path.is_file() else None


def ticket_rows(state: FactoryState, layout: RunLayout, promotions: Sequence[Promotion]) -> list[TicketRow]:
    """Every ticket the run ran, in order, with its verdict, the judge's decision and what it built
    on (from its lineage row: the promoted model whose config it patched, or the base config)."""
    decisions = {d.ticket_id: d for d in state.decisions}
    compared = {c.ticket_id: c for c in layout.dev_comparisons()}
    tickets = {t.id: t for t in layout.started()}
    lineage = layout.lineage()
    configs_of = {p.sha256: p.ticket_id for p in promotions if p.config}
    rows = []
    for entry in state.history:
        tid = entry.ticket_id
        outcome, cmp, ticket = _outcome(layout, tid), compared.get(tid), tickets.get(tid)
        replicate_of = ticket.replicate_of if ticket else None
        decision = decisions.get(tid) if not replicate_of else None
        parent = lineage.get(tid)
        rows.append(
            TicketRow(
                ticket_id=tid,
                arm=entry.arm.value,
                kind=ticket.kind.value if ticket else "?",
                replicate_of=replicate_of,
                hypothesis=entry.hypothesis,
                change=entry.change,
                status=outcome.status.value if outcome else "not run",
                reason=outcome.reason if outcome else None,
                device_seconds=outcome.device_seconds if outcome else 0.0,
                dev_metrics=outcome.evidence.dev_metrics if outcome and outcome.evidence else {},
                best_dev_object_f1=cmp.best_object_f1 if cmp else None,
                dev_win=cmp.dev_win if cmp else None,
                verdict=str(entry.verdict),
                tier=entry.tier,
                decision=decision.decision.value if decision else None,
                decision_reason=decision.reason if decision else None,
                built_on=parent.parent_sha256 if parent else None,
                built_on_ticket=configs_of.get(parent.parent_sha256) if parent else None,
            )
        )
    return rows


def counts(rows: list[TicketRow], state: FactoryState) -> dict[str, int]:
    originals = [r for r in rows if r.replicate_of is None]
    promoted = [d for d in state.decisions if d.decision == "promote"]
    return {
        "tickets": len(rows),
        "dev_wins": sum(1 for r in originals if r.dev_win),
        "dev_losses": sum(1 for r in rows if r.verdict == "DEV_LOSS"),
        "failed": sum(1 for r in rows if r.verdict == "FAILED"),
        "gate_queries": sum(1 for r in rows if r.tier is not None),
        "survived_confirm_a": sum(1 for r in originals if r.verdict == "WIN"),
        "replicates": len(rows) - len(originals),
        "promoted": len(promoted),
    }


def refused_drafts(home: Home, run_id: str) -> list[RefusedDraft]:
    """The run's drafts that validation refused (audit event ``ticket_invalid``), with the reasons:
    a people's list of what the proposer wanted and could not have."""

    out: list[RefusedDraft] = []
    seen: list[tuple[str, str, list[str]]] = []  # as the audit log holds them, before they are made inert
    for record in iter_records(home.audit / "log.jsonl"):
        if record.run_id == run_id and record.event == "ticket_invalid":
            ticket = record.payload.get("ticket")
            ticket = (
                ticket
                if isinstance(ticket, dict)
                else {"hypothesis": "(the draft is stored as an audit blob)"}
            )
            hypothesis, kind = str(ticket.get("hypothesis", "")), str(ticket.get("kind", ""))
            reasons = [str(r) for r in record.payload.get("reasons", [])]
            if (hypothesis, kind, reasons) not in seen:  # a draft refused at several propose steps: once
                seen.append((hypothesis, kind, reasons))
                out.append(RefusedDraft(hypothesis=hypothesis, kind=kind, reasons=reasons))
    return out


def approval_rows(queue: ApprovalQueue, run_id: str) -> list[ApprovalRow]:
    """The data requests ``run_id`` made, and earlier runs' requests it took up, oldest first."""
    taken = queue.taken()
    return [
        ApprovalRow(
            id=a.id,
            status=a.status,
            hypothesis=a.ticket.hypothesis,
            run_id=a.run_id,
            taken_by=taken.get(a.id),
            decided_by=a.decided_by,
            reason=a.reason,
        )
        for a in queue.requests()
        if a.run_id == run_id or taken.get(a.id) == run_id
    ]


def audit_summary(home: Home, run_id: str, anchor: Any, anchor_checked: bool) -> AuditSummary:
    """The chain verified against the gate's anchor, and the protected-path findings."""

    verified = verify_log(home.audit, anchor, anchor_checked=anchor_checked)
    records = list(iter_records(home.audit / "log.jsonl"))
    findings = check_records(records, load_policy(), home.root)
    mine = [f for f in findings if f.run_id == run_id]
    held = [
        str(r.payload.get("ticket"))
        for r in records
        if r.run_id == run_id and r.event == "ticket_held" and r.payload.get("pending") == "audit"
    ]
    return AuditSummary(
        ok=verified.ok,
        records=verified.records,
        run_records=sum(1 for r in records if r.run_id == run_id),
        head_seq=verified.head_seq,
        anchor_seq=verified.anchor.seq if verified.anchor else None,
        unanchored_from=verified.unanchored_from,
        problems=verified.problems,
        protected_read_attempts=sum(1 for r in records if r.event == "protected_read_attempt"),
        path_escape_attempts=sum(1 for r in records if r.event == "path_escape_attempt"),
        findings=len(findings),
        run_findings=mine[:MAX_RUN_FINDINGS],
        run_findings_total=len(mine),
        run_findings_truncated=len(mine) > MAX_RUN_FINDINGS,
        held_for_findings=held,
    )


def plan_spend(layout: RunLayout, rows: Sequence[TicketRow], plan: ProfilePlan | None) -> list[PlanSpend]:
    """Device time per phase of the budget plan: its tickets (and their replicates) as trained."""
    if plan is None:
        return []
    phase_of = {r.ticket_id: r.phase for r in layout.plan_rows()}
    out = []
    for phase, share in (
        ("screen", plan.screen.share),
        ("rung", plan.rungs.share),
        ("final", plan.final.share),
    ):
        mine = [t for t in rows if phase_of.get(t.replicate_of or t.ticket_id) == phase]
        out.append(
            PlanSpend(
                phase=phase,
                share=share,
                tickets=len(mine),
                device_seconds=sum(t.device_seconds for t in mine),
            )
        )
    return out


def first_analysis(layout: RunLayout, state: FactoryState) -> str | None:
    """The dev analysis of the best the run started from: its first round's (None: no round)."""
    if not state.rounds:
        return None
    folder = layout.analysis_dir(state.rounds[0].incumbent)
    return str(folder) if (folder / REPORT_JSON).is_file() else None


def write(report: RunReport, people: Path, tickets_dir: Path | None = None) -> dict[str, Path]:
    """Write report.json, report.md and report.html (with plots) under ``people``."""

    plots_dir = people / PLOTS_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    plots = copy_analysis_plots(Path(report.analysis_dir) if report.analysis_dir else None, plots_dir)
    if dev_plot(report.tickets, plots_dir / "dev_f1.png"):
        plots["dev_f1"] = f"{PLOTS_DIR}/dev_f1.png"
    if tickets_dir is not None and curves_plot(report.tickets, tickets_dir, plots_dir / "curves.png"):
        plots["curves"] = f"{PLOTS_DIR}/curves.png"
    report = report.model_copy(update={"plots": plots})
    paths = {"json": people / REPORT_JSON, "md": people / REPORT_MD, "html": people / REPORT_HTML}
    write_atomic(paths["json"], report.model_dump_json(indent=2) + "\n")
    write_atomic(paths["md"], render_markdown(report))
    write_atomic(paths["html"], render_html(report))
    return paths


def loop_rounds(layout: RunLayout, state: FactoryState) -> list[RoundRow]:
    """The run as rounds: the weakness the analysis named, each fix tried on that best, and its result.

    People only (dev numbers and predictions); rounds where the fix did nothing or made things
    worse are listed like the others.
    """
    lineage = layout.lineage()
    dev = {r.ticket_id: r for r in layout.dev_comparisons()}
    predicted = {r.ticket_id: r for r in layout.predictions() if isinstance(r, DevPrediction)}
    verdicts = {h.ticket_id: str(h.verdict) for h in state.history}
    tickets = {t.id: t for t in layout.started()}
    out = []
    for row in state.rounds:
        analysis = layout.analysis_dir(row.incumbent) / REPORT_JSON
        weakness = ""
        if analysis.is_file():
            recs = json.loads(analysis.read_text()).get("recommendations", [])
            weakness = "; ".join(f"{r['id']}: {r.get('rationale', '')}" for r in recs[:WEAKNESSES_SHOWN])
        tried = []
        for tid, lin in lineage.items():
            if lin.parent_sha256 != row.incumbent or tid not in tickets:
                continue
            pred, cmp = predicted.get(tid), dev.get(tid)
            tried.append(
                TriedFix(
                    ticket_id=tid,
                    hypothesis=tickets[tid].hypothesis,
                    change=tickets[tid].change,
                    verdict=verdicts.get(tid, "not recorded"),
                    dev_object_f1=cmp.object_f1 if cmp else None,
                    best_dev_object_f1=cmp.best_object_f1 if cmp else None,
                    # as JSON, so that its strings are made inert with the rest of the row
                    predicted=pred.predicted.model_dump(mode="json") if pred else None,
                    observed_change=pred.observed_change if pred else None,
                    held=pred.held if pred else None,
                )
            )
        out.append(RoundRow(round=row.round, incumbent=row.incumbent, weakness=weakness, tried=tried))
    return out


__all__ = [
    "PLOTS_DIR",
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "ApprovalRow",
    "AuditSummary",
    "Headline",
    "HomeRecords",
    "LabelRoundRow",
    "QueuedTicket",
    "RefusedDraft",
    "RetractionRow",
    "RoundRow",
    "RunReport",
    "SealedScore",
    "TicketRow",
    "TriedFix",
    "approval_rows",
    "audit_summary",
    "counts",
    "first_analysis",
    "plan_spend",
    "headline",
    "home_records",
    "loop_rounds",
    "read_milestone",
    "refused_drafts",
    "render_html",
    "render_markdown",
    "ticket_rows",
    "write",
]
