"""The morning report of a run: ``runs/<id>/people/report.md`` and ``report.html`` (people only).

``gather(...)`` collects a ``RunReport`` from what the host recorded: the graph's final state
(history of coarse verdicts, the judge's decisions, budget counters), each ticket's
``outcome.json`` (the runner's host-computed evidence), ``people/dev_comparisons.jsonl``, the
milestone under ``people/milestones/``, the audit log (verified against the gate's anchor) and
the LLM usage. ``write(report, people_dir)`` renders Markdown, HTML and a plot. Nothing here ever
goes back into an agent's context (trust rule 9).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents._predictions import PREDICTIONS_FILE
from agents._report_md import render_markdown
from agents.challenge import retractions
from agents.incumbent import read_lineage
from agents.labelling import label_rounds
from analysis.render import to_html
from audit import Finding, check_records, iter_records, load_policy, verify_log
from runner import read_beneath
from segfactory.files import read_jsonl
from segfactory.home import Home

MAX_RUN_FINDINGS = 500  # listed in the report's record; past it: run_findings_truncated, the count kept
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
REPORT_JSON = "report.json"
PLOTS_DIR = "plots"


class _Rec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TicketRow(_Rec):
    """One ticket as people see it: the hypothesis, the change, the host's numbers and the verdicts."""

    ticket_id: str
    arm: str
    kind: str
    replicate_of: str | None = None
    hypothesis: str
    change: dict[str, Any]
    status: str  # DONE | FAILED | REFUSED | not run
    reason: str | None = None
    device_seconds: float = 0.0
    dev_metrics: dict[str, float] = Field(default_factory=dict)
    best_dev_object_f1: float | None = None
    dev_win: bool | None = None
    verdict: str  # WIN | NO_WIN | INVALID | BUDGET_EXHAUSTED | DEV_LOSS | FAILED
    tier: str | None = None
    decision: str | None = None  # replicate | promote | reject | escalate (the judge), None: not judged
    decision_reason: str | None = None


class AuditSummary(_Rec):
    ok: bool
    records: int
    run_records: int
    head_seq: int | None
    anchor_seq: int | None
    unanchored_from: int | None
    problems: list[str]
    protected_read_attempts: int
    path_escape_attempts: int
    findings: int
    # this run's findings, each with its ticket, in log order (at most MAX_RUN_FINDINGS)
    run_findings: list[Finding] = Field(default_factory=list)
    run_findings_total: int = 0
    run_findings_truncated: bool = False
    held_for_findings: list[str] = Field(
        default_factory=list
    )  # tickets held for a person (ticket_held, audit)


class RunReport(_Rec):
    schema_version: int = 1
    run_id: str
    profile: str
    proposer: str
    backend: str
    base_config: str | None = (
        None  # the training config every ticket patched (None: a run before it was recorded)
    )
    sized_note: str = ""  # why a GPU-sized profile ran its CPU-sized config ("" when it did not)
    concurrency: int = 1  # tickets trained at once (run --concurrency)
    stop_reason: str
    started_at: float | None
    ended_at: float
    win_rule_sha256: str | None
    tickets: list[TicketRow]
    not_run: list[dict[str, Any]]  # queued when the budget ran out
    approvals: list[dict[str, Any]]
    counts: dict[str, int]
    device_seconds: float
    milestone: dict[str, Any] | None
    audit: AuditSummary | None
    llm_usage: dict[str, Any]
    analysis_dir: str | None
    plots: dict[str, str] = Field(default_factory=dict)
    label_rounds: list[dict[str, Any]] = Field(default_factory=list)  # the home's labelling rounds so far
    retractions: list[dict[str, Any]] = Field(default_factory=list)  # the home's retracted claims so far
    refused: list[dict[str, Any]] = Field(default_factory=list)  # drafts validation refused before queueing
    rounds: list[dict[str, Any]] = Field(default_factory=list)  # weakness, fixes tried on that best, results
    predictions: list[dict[str, Any]] = Field(
        default_factory=list
    )  # each executed recommendation: predicted, measured
    hit_rate: dict[str, Any] = Field(
        default_factory=dict
    )  # recommendation vs default action, Wilson intervals
    not_executable: list[dict[str, Any]] = Field(
        default_factory=list
    )  # recommendations that became no ticket


def home_records(home: Home) -> dict[str, list[dict[str, Any]]]:
    """The home's labelling rounds and retracted claims, as every later report lists them."""

    rounds = [
        {
            "round": r.round,
            "reviewed": r.reviewed,
            "kept": r.kept,
            "fixed": r.fixed,
            "dropped": r.dropped,
            "precision": r.precision,
            "human_minutes_per_image": r.human_minutes_per_image,
            "labels_per_hour": r.labels_per_hour,
            "dev_object_f1": r.dev_object_f1,
            "dev_gain": r.dev_gain,
            "gate_verdict": r.gate_verdict,
            "status": r.status,
        }
        for r in label_rounds(home)
    ]
    retracted = [
        {
            "challenge_id": c.challenge_id,
            "ticket_id": c.claim.ticket_id,
            "run_id": c.claim.run_id,
            "claim": c.claim.kind.value,
            "reason": c.reasons[0] if c.reasons else "",
            "demoted": c.demoted,
        }
        for c in retractions(home)
    ]
    return {"label_rounds": rounds, "retractions": retracted}


def _outcome(tickets_dir: Path, ticket_id: str) -> dict[str, Any]:
    path = tickets_dir / ticket_id / "outcome.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def ticket_rows(
    state: dict[str, Any],
    tickets_dir: Path,
    comparisons: list[dict[str, Any]],
    tickets: dict[str, dict[str, Any]],
) -> list[TicketRow]:
    """Every ticket the run ran, in order, with its verdict and the judge's decision."""
    decisions = {d["ticket_id"]: d for d in state.get("decisions", [])}
    compared = {c["ticket_id"]: c for c in comparisons}
    rows = []
    for entry in state.get("history", []):
        tid = entry["ticket_id"]
        outcome, cmp, ticket = _outcome(tickets_dir, tid), compared.get(tid, {}), tickets.get(tid, {})
        decision = decisions.get(tid) if not ticket.get("replicate_of") else None
        evidence = outcome.get("evidence") or {}
        rows.append(
            TicketRow(
                ticket_id=tid,
                arm=entry["arm"],
                kind=ticket.get("kind", "?"),
                replicate_of=ticket.get("replicate_of"),
                hypothesis=entry["hypothesis"],
                change=entry.get("change", {}),
                status=outcome.get("status", "not run"),
                reason=outcome.get("reason"),
                device_seconds=float(outcome.get("device_seconds", 0.0)),
                dev_metrics=evidence.get("dev_metrics", {}),
                best_dev_object_f1=cmp.get("best_object_f1"),
                dev_win=cmp.get("dev_win"),
                verdict=entry["verdict"],
                tier=entry.get("tier"),
                decision=decision["decision"] if decision else None,
                decision_reason=decision["reason"] if decision else None,
            )
        )
    return rows


def counts(rows: list[TicketRow], state: dict[str, Any]) -> dict[str, int]:
    originals = [r for r in rows if r.replicate_of is None]
    promoted = [d for d in state.get("decisions", []) if d["decision"] == "promote"]
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


def refused_drafts(home: Home, run_id: str) -> list[dict[str, Any]]:
    """The run's drafts that validation refused (audit event ``ticket_invalid``), with the reasons:
    a people's list of what the proposer wanted and could not have."""

    out: list[dict[str, Any]] = []
    for record in iter_records(home.audit / "log.jsonl"):
        if record.run_id == run_id and record.event == "ticket_invalid":
            ticket = record.payload.get("ticket")
            ticket = (
                ticket
                if isinstance(ticket, dict)
                else {"hypothesis": "(the draft is stored as an audit blob)"}
            )
            row = {
                "hypothesis": str(ticket.get("hypothesis", "")),
                "kind": str(ticket.get("kind", "")),
                "reasons": [str(r) for r in record.payload.get("reasons", [])],
            }
            if row not in out:  # the same draft refused at several propose steps is listed once
                out.append(row)
    return out


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


def dev_plot(rows: list[TicketRow], out: Path) -> bool:
    """Dev object F1 per ticket against the best at the time (host-computed)."""
    scored = [r for r in rows if "object_f1" in r.dev_metrics]
    if not scored:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(scored)), 3.2))
    xs = range(len(scored))
    colours = ["tab:green" if r.dev_win else "tab:grey" for r in scored]
    ax.bar(xs, [r.dev_metrics["object_f1"] for r in scored], color=colours)
    ax.plot(xs, [r.best_dev_object_f1 or 0.0 for r in scored], "k_", markersize=24, label="current best")
    ax.set_xticks(list(xs), [r.ticket_id.rsplit("-", 1)[-1] for r in scored], rotation=45, fontsize=7)
    ax.set_ylabel("dev object F1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True


CURVE_FILE = "out/learning_curve.jsonl"  # written by the worker inside the sandbox: shown, never evidence
MAX_CURVE_BYTES = 1024**2  # past this the curve is cut (read_beneath reports it truncated)


def _curve(work: Path) -> list[dict[str, Any]]:
    """A ticket's learning curve, read beneath its workspace with no symlink followed."""

    try:
        data, _ = read_beneath(work, CURVE_FILE, cap=MAX_CURVE_BYTES)
    except Exception:  # absent, refused (a symlink, a FIFO) or unreadable: no curve for this ticket
        return []
    rows = []
    for line in data.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("train_loss"), int | float):
            rows.append(row)
    return rows


def curves_plot(rows: list[TicketRow], tickets_dir: Path, out: Path) -> bool:
    """Train loss per epoch for every ticket that trained (as the sandboxed worker reported it)."""
    curves = {r.ticket_id: _curve(tickets_dir / r.ticket_id / "work") for r in rows}
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for tid, curve in curves.items():
        ax.plot(
            [c.get("epoch", k) for k, c in enumerate(curve)],
            [c["train_loss"] for c in curve],
            "o-",
            label=tid.rsplit("-", 1)[-1],
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("train loss (sandbox-reported)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True


def copy_analysis_plots(analysis_dir: Path | None, plots_dir: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    if analysis_dir is None:
        return found
    for name in ("errors.png", "slices.png", "learning_curve.png"):
        if (analysis_dir / name).is_file():
            shutil.copyfile(analysis_dir / name, plots_dir / f"best-{name}")
            found[name.removesuffix(".png")] = f"{PLOTS_DIR}/best-{name}"
    return found


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
    md = render_markdown(report)
    paths = {"json": people / REPORT_JSON, "md": people / REPORT_MD, "html": people / REPORT_HTML}
    paths["json"].write_text(report.model_dump_json(indent=2) + "\n")
    paths["md"].write_text(md)
    page = to_html(md).replace(
        "<title>segfactory analysis</title>", f"<title>segfactory run {report.run_id}</title>"
    )
    paths["html"].write_text(page.replace("<p>- ", "<p>&bull; "))
    return paths


__all__ = [
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "AuditSummary",
    "RunReport",
    "TicketRow",
    "audit_summary",
    "counts",
    "home_records",
    "ticket_rows",
    "write",
]


def loop_rounds(home: Home, run_id: str, state: dict[str, Any]) -> list[dict[str, Any]]:
    """The run as rounds: the weakness the analysis named, each fix tried on that best, and its result.

    People only (dev numbers and predictions); rounds where the fix did nothing or made things
    worse are listed like the others.
    """
    lineage = read_lineage(home.runs / run_id)
    people = home.people_dir(run_id)
    dev = {r["ticket_id"]: r for r in read_jsonl(people / "dev_comparisons.jsonl")}
    predicted = {r["ticket_id"]: r for r in read_jsonl(people / PREDICTIONS_FILE) if r.get("stage") == "dev"}
    verdicts = {h["ticket_id"]: h["verdict"] for h in state.get("history", [])}
    tickets = {t["id"]: t for t in read_jsonl(people / "tickets.jsonl")}
    out = []
    for row in state.get("rounds", []):
        sha = row.get("incumbent", "")
        analysis = home.runs / run_id / "analysis" / sha[:12] / "report.json"
        weakness = ""
        if analysis.is_file():
            recs = json.loads(analysis.read_text()).get("recommendations", [])
            weakness = "; ".join(f"{r['id']}: {r.get('rationale', '')}"[:160] for r in recs[:3])
        tried = []
        for tid, lin in lineage.items():
            if lin.parent_sha256 != sha or tid not in tickets:
                continue
            pred = predicted.get(tid, {})
            tried.append(
                {
                    "ticket_id": tid,
                    "hypothesis": tickets[tid]["hypothesis"][:120],
                    "change": tickets[tid]["change"],
                    "verdict": verdicts.get(tid, "not recorded"),
                    "dev_object_f1": (dev.get(tid) or {}).get("object_f1"),
                    "best_dev_object_f1": (dev.get(tid) or {}).get("best_object_f1"),
                    "predicted": pred.get("predicted"),
                    "observed_change": pred.get("observed_change"),
                    "held": pred.get("held"),
                }
            )
        out.append({"round": row["round"], "incumbent": sha, "weakness": weakness, "tried": tried})
    return out
