"""The run report as sections of Markdown, rendered from a ``RunReport`` alone.

``sections(report)`` gives the report in reading order, the outcome first; ``render_markdown``
joins them into ``report.md`` and ``agents._report_html`` renders the same sections as HTML. A
section is a list of blocks; a block with a ``fold`` title holds text given in full (every
ticket's hypothesis and reasons), which the HTML shows folded under that title. Every value goes
into the Markdown through ``agents._report_text`` (``text`` or ``code``), never as Markdown.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from agents._report_caveats import did_not_do, starts
from agents._report_outcome import headline_lines
from agents._report_records import ApprovalRow, AuditSummary, RunReport, TicketRow, TriedFix
from agents._report_text import NOT_MEASURED, code, number, sha_text, text, ticket_text
from agents.promotion import MilestoneFile
from segfactory.stats import Interval

HYPOTHESIS_CELL = 90  # characters of a hypothesis in a table cell (in full in the ticket list)
CHANGE_CELL = 60  # characters of a change patch in a table cell (in full in the ticket list)
ROUND_CELL = 70  # characters of a fix in the rounds table
PROBLEMS_SHOWN = 3  # audit problems listed; the rest are counted


@dataclass(frozen=True)
class Block:
    """Markdown lines; with ``fold``, the HTML shows them folded under that title."""

    lines: list[str]
    fold: str | None = None


@dataclass(frozen=True)
class Section:
    title: str
    anchor: str  # the HTML section's id
    blocks: list[Block] = field(default_factory=list)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else NOT_MEASURED


def _sentence(value: str) -> str:
    return value if value.endswith((".", "!", "?", "…")) else f"{value}."


def sections(r: RunReport) -> list[Section]:
    """The whole report in reading order: outcome, the run, caveats, then the evidence."""
    return [
        Section("Outcome", "outcome", _outcome(r)),
        Section("The run", "run", [Block(_run(r))]),
        Section("Where the device time went", "budget-plan", [Block(_budget_plan(r))]),
        Section("What this run did not do", "did-not-do", [Block(did_not_do(r) or ["- Nothing to list."])]),
        Section("Every ticket", "tickets", _tickets(r)),
        Section("Rounds: weakness, fix tried, result", "rounds", _rounds(r)),
        Section("Scored predictions", "predictions", [Block(_predictions(r))]),
        Section("Milestone: sealed and never-queried tiers", "milestone", [Block(_milestone(r))]),
        Section("Plots", "plots", [Block(_plots(r))]),
        Section("Data requests (approvals queue)", "approvals", [Block(_approvals(r))]),
        Section(
            "Labelling rounds and retracted claims (this home, so far)", "labelling", [Block(_labelling(r))]
        ),
        Section("Audit", "audit", [Block(_audit(r))]),
        Section("LLM usage", "llm", [Block(_llm(r))]),
    ]


def title(r: RunReport) -> str:
    return f"Run {text(r.run_id)}"


def render_markdown(r: RunReport) -> str:
    """``report.md``: the sections under the run's title; folded blocks are plain text here."""
    lines = [f"# {title(r)}", ""]
    for section in sections(r):
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            lines += ([f"{block.fold}:", ""] if block.fold else []) + block.lines + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


# -- outcome -------------------------------------------------------------------------------------


def _outcome(r: RunReport) -> list[Block]:
    c = r.counts
    counts = [
        f"- tickets run: {c.get('tickets', 0)} ({c.get('replicates', 0)} replicates); dev losses "
        f"{c.get('dev_losses', 0)}, failed {c.get('failed', 0)}",
        f"- dev wins: {c.get('dev_wins', 0)}; gate queries: {c.get('gate_queries', 0)}",
        f"- wins that survived confirm-a: {c.get('survived_confirm_a', 0)}",
        f"- promoted (confirm-a WIN and a replicate WIN on confirm-b): {c.get('promoted', 0)}",
    ]
    blocks = [Block(headline_lines(r))]
    if "dev_f1" in r.plots:
        blocks.append(
            Block(
                [
                    "Progress on dev: each ticket's object F1 (green: a dev win) against the best's "
                    "at the time:",
                    "",
                    f"![dev object F1 per ticket]({r.plots['dev_f1']})",
                ]
            )
        )
    return [*blocks, Block(counts)]


# -- the run -------------------------------------------------------------------------------------


def _budget_plan(r: RunReport) -> list[str]:
    """The budget plan's phases: each one's written share and what it spent (people only)."""
    if not r.budget_plan:
        return [
            f"No budget plan: every ticket was the proposer's, {number(r.device_seconds, 0)} device-s in all."
        ]
    total = sum(p.device_seconds for p in r.budget_plan)
    lines = [
        "The run spent its device budget by the written plan (policies/budget_plan.yaml): screens, rungs "
        "that continue the best of the level before, one long final of the best recipe.",
        "",
        "| phase | share written | tickets | device-s | share spent |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in r.budget_plan:
        spent = p.device_seconds / total if total else 0.0
        lines.append(
            f"| {text(p.phase)} | {p.share:.0%} | {p.tickets} | {number(p.device_seconds, 0)} | {spent:.0%} |"
        )
    return lines


def _run(r: RunReport) -> list[str]:
    config = [
        f"- training config {code(r.base_config)}" + (f": {text(r.sized_note)}" if r.sized_note else "")
    ]
    device = f"- device time spent {r.device_seconds:.0f} s" + (
        f"; tickets trained {r.concurrency} at a time, each charged its own sandbox time"
        if r.concurrency > 1
        else ""
    )
    return [
        f"- profile {code(r.profile)}, proposer {code(r.proposer)}, sandbox backend {code(r.backend)}",
        *(config if r.base_config else []),
        f"- started {_when(r.started_at)}, ended {_when(r.ended_at)}; "
        f"stopped because: {text(r.stop_reason or 'done')}",
        f"- win rule sha256 {code((r.win_rule_sha256 or NOT_MEASURED)[:16])} (pinned at start)",
        device,
        *starts(r.tickets),
    ]


# -- tickets -------------------------------------------------------------------------------------


def _tickets(r: RunReport) -> list[Block]:
    table = [
        "All tickets, including the ones that did nothing or made things worse. Dev numbers are "
        "computed on the host from the copied-out model (confined scorer); verdicts are the gate's.",
        "",
        "| ticket | arm, kind | hypothesis | change | dev object F1 (best then) | device s | verdict "
        "| decision |",
        "|---|---|---|---|---|---|---|---|",
        *(_ticket_row(r, t) for t in r.tickets),
    ]
    blocks = [Block(table if r.tickets else ["No ticket ran."])]
    if r.tickets:
        blocks.append(Block([_ticket_in_full(t) for t in r.tickets], fold="Every ticket in full"))
    if r.not_run:
        blocks.append(
            Block([f"- {text(q.id)}: {text(q.hypothesis)}" for q in r.not_run], fold="Queued but not run")
        )
    if r.refused:
        refused = [
            f"- {text(q.kind)} ticket “{text(q.hypothesis)}”, refused: {text('; '.join(q.reasons))}"
            for q in r.refused
        ]
        blocks.append(Block(refused, fold="Proposed but refused before queueing (validation)"))
    return blocks


def _change(t: TicketRow) -> str:
    return json.dumps(t.change, sort_keys=True)


def _ticket_row(r: RunReport, t: TicketRow) -> str:
    verdict = f"{t.verdict} ({t.tier})" if t.tier else t.verdict
    decision = text(t.decision) if t.decision else "-"
    if t.replicate_of is not None:
        decision = f"replicate of {ticket_text(r.run_id, t.replicate_of)}"
    cells = [
        ticket_text(r.run_id, t.ticket_id),
        f"{text(t.arm)}, {text(t.kind)}",
        text(t.hypothesis, HYPOTHESIS_CELL),
        code(_change(t), CHANGE_CELL, cell=True) if t.change else "-",
        f"{number(t.dev_metrics.get('object_f1'))} ({number(t.best_dev_object_f1)})",
        f"{t.device_seconds:.0f}",
        text(verdict),
        decision,
    ]
    return "| " + " | ".join(cells) + " |"


def _ticket_in_full(t: TicketRow) -> str:
    built = f", built on {sha_text(t.built_on)}" if t.built_on else ""
    if t.built_on_ticket:
        built += f" from {text(t.built_on_ticket)}"
    head = f"- **{text(t.ticket_id)}** ({text(t.arm)}, {text(t.kind)}{built}):"
    parts = [head, _sentence(text(t.hypothesis))]
    if t.change:
        parts.append(f"Change: {code(_change(t))}.")
    parts.append(f"Status {text(t.status)}; dev dice {number(t.dev_metrics.get('dice'))}.")
    if t.reason:
        parts.append(f"Outcome: {_sentence(text(t.reason))}")
    if t.decision_reason:
        parts.append(f"Judge ({text(t.decision)}): {_sentence(text(t.decision_reason))}")
    return " ".join(parts)


# -- rounds and predictions ----------------------------------------------------------------------


def _rounds(r: RunReport) -> list[Block]:
    """Weakness, fix tried, result: one block per analysis of a best."""
    if not r.rounds:
        return [Block(["No round was recorded."])]
    blocks = [
        Block(
            [
                "Each round analyses the current best on dev; its tickets patch that best. Fixes that did "
                "nothing or made things worse are listed too; each is in full under Every ticket."
            ]
        )
    ]
    for rnd in r.rounds:
        lines = [
            f"### Round {rnd.round} (best {sha_text(rnd.incumbent)})",
            "",
            f"Weakness: {text(rnd.weakness or 'none named')}",
            "",
        ]
        if not rnd.tried:
            blocks.append(Block([*lines, "No ticket ran on this best."]))
            continue
        lines += [
            "| ticket | fix tried | dev object F1 (best then) | predicted | measured | held | verdict |",
            "|---|---|---|---|---|---|---|",
            *(_round_row(r, t) for t in rnd.tried),
        ]
        blocks.append(Block(lines))
    return blocks


def _round_row(r: RunReport, t: TriedFix) -> str:
    p = t.predicted
    pred = f"{p.metric} on {p.slice} {p.direction.value} {p.size}" if p else "-"
    measured = f"{t.observed_change:+.3f}" if t.observed_change is not None else "-"
    held = "-" if t.held is None else ("yes" if t.held else "no")
    return (
        f"| {ticket_text(r.run_id, t.ticket_id)} | {text(t.hypothesis, ROUND_CELL)} | "
        f"{number(t.dev_object_f1)} ({number(t.best_dev_object_f1)}) | {text(pred)} | {measured} | "
        f"{held} | {text(t.verdict)} |"
    )


def _predictions(r: RunReport) -> list[str]:
    rates = r.hit_rate
    arms = [] if rates is None else [rates.recommendation, rates.default, rates.sealed]
    lines = []
    if not any(a.n for a in arms):
        lines += ["No recommendation's prediction was scored in this run.", ""]
    labels = (
        "recommendations (dev)",
        "default action at the same cost (fresh-seed re-run of the best)",
        "promoted recommendations (sealed)",
    )
    for a, label in zip(arms, labels, strict=False):
        if not a.n:
            lines.append(f"- hit rate of {label}: none scored")
        else:
            lines.append(
                f"- hit rate of {label}: {a.held}/{a.n} = {a.rate:.2f} "
                f"[{a.low:.2f}, {a.high:.2f}] (Wilson 95%)"
            )
    if r.calibration:
        lines += [
            "",
            "Predicted against measured on dev, per rule (sizes in the predicted direction; the next "
            "prediction's share of the shortfall is the rule's prior averaged with every share "
            "measured in this home):",
            "",
            "| rule | scored | mean predicted | mean measured | prior share | measured here | next share |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {text(c.rule)} | {c.scored} | {c.mean_predicted:+.3f} | {c.mean_measured:+.3f} | "
            f"{c.prior_share:.2f} | {c.measured_in_home} | {c.next_share:.2f} |"
            for c in r.calibration
        ]
    if r.not_executable:
        lines += ["", "Recommendations that became no ticket:", ""]
        lines += [f"- {text(n.recommendation_id)}: {text(n.reason)}" for n in r.not_executable]
    return lines


# -- milestone, plots, approvals, labelling ------------------------------------------------------


def _milestone(r: RunReport) -> list[str]:
    m = r.milestone
    if m is None:
        return ["No milestone was scored."]
    if m.error:
        return [f"The milestone was refused by the gate: {text(m.error)}"]
    names = {sha: ("current best" if sha == m.best_sha256 else "classical detector") for sha in m.models}
    lines = [
        "| tier | version | model | object F1 | interval | pixel IoU | images |",
        "|---|---|---|---|---|---|---|",
    ]
    for tier, block in m.tiers.items():
        if block.error:
            lines.append(f"| {text(tier)} | v{block.version} | not scored: {text(block.error)} | | | | |")
        for sha, s in block.models.items():
            f1 = s.object_f1
            lines.append(
                f"| {text(tier)} | v{block.version} | {names.get(sha, 'model')} {sha_text(sha)} | "
                f"{number(f1.estimate)} | {1 - f1.alpha:.0%} [{number(f1.low)}, "
                f"{number(f1.high)}] | "
                f"{number(s.pixel_iou)} | {s.n_images} |"
            )
    return [*lines, "", *_gap(m)]


def _best_f1(m: MilestoneFile, tier: str) -> Interval | None:
    """The current best's object F1 on ``tier``; None when the tier or the best's score is missing."""
    block = m.tiers.get(tier)
    score = block.models.get(m.best_sha256) if block is not None and m.best_sha256 is not None else None
    return score.object_f1 if score is not None else None


def _gap(m: MilestoneFile) -> list[str]:
    """sealed minus never-queried for the current best, and whether their intervals overlap."""
    sealed, never = _best_f1(m, "sealed"), _best_f1(m, "never-queried")
    if sealed is None or never is None:
        return ["Never-queried gap: not measured (a tier or the best's score is missing)."]
    overlap = sealed.low <= never.high and never.low <= sealed.high
    return [
        f"Never-queried gap (sealed − never-queried object F1 of the current best): "
        f"{sealed.estimate - never.estimate:+.4f}; the intervals "
        f"{'overlap' if overlap else 'do NOT overlap'}. Milestone scores on sealed guide people's "
        "choices; never-queried is read only for this comparison, so a sealed score clearly above "
        "never-queried would mean the milestones themselves are being overfit."
    ]


PLOT_TITLES = {
    "errors": "Error types of the starting best on dev",
    "slices": "Slices of the starting best on dev",
    "learning_curve": "Learning curve of the starting best",
    "curves": "Learning curves of the tickets (train loss as the sandboxed worker reported it; not evidence)",
}


def _plots(r: RunReport) -> list[str]:
    lines = []
    for key, path in r.plots.items():
        if key != "dev_f1":  # the outcome shows it
            lines += [f"{PLOT_TITLES.get(key, text(key))}:", "", f"![{text(key)}]({path})", ""]
    if "curves" not in r.plots:
        lines += ["No ticket reported a learning curve.", ""]
    if r.analysis_dir:
        lines += [f"The full dev analysis of the starting best: {code(r.analysis_dir + '/report.html')}."]
    return lines


def _approvals(r: RunReport) -> list[str]:
    if not r.approvals:
        return ["No data requests were made."]
    lines = []
    for a in r.approvals:
        asked = "" if a.run_id == r.run_id else f" (asked by run {text(a.run_id)})"
        lines.append(f"- {text(a.id)}{asked}: {text(a.status)}{_approval_state(r, a)} — {text(a.hypothesis)}")
    return lines


def _approval_state(r: RunReport, a: ApprovalRow) -> str:
    if a.status == "pending":
        return f"; decide with `segfactory approvals approve|deny {text(a.id)}`"
    if a.status == "denied":
        by = f" by {text(a.decided_by)}" if a.decided_by else ""
        return f"{by}" + (f": {text(a.reason)}" if a.reason else "")
    if a.taken_by == r.run_id:
        return f"; queued in this run as data ticket {text(a.id)}-data"
    if a.taken_by:
        return f"; taken up by run {text(a.taken_by)}"
    return "; not taken up yet: the next run in this home queues it at its first propose step"


def _labelling(r: RunReport) -> list[str]:
    """The home's labelling rounds and retracted claims (they outlive the run that made them)."""
    lines = []
    if not r.label_rounds:
        lines += [
            "No labelling round has finished in this home (`segfactory label propose`, then review, "
            "then `segfactory label finetune`).",
            "",
        ]
    else:
        lines += [
            "| round | reviewed | kept / fixed / dropped | precision | min/image | labels/hour "
            "| dev object F1 | dev gain | gate |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {text(x.round)} | {x.reviewed} | {x.kept} / {x.fixed} / {x.dropped} | "
            f"{number(x.precision)} | {number(x.human_minutes_per_image)} | "
            f"{number(x.labels_per_hour, 0)} | {number(x.dev_object_f1)} | {number(x.dev_gain)} | "
            f"{text(x.gate_verdict or x.status)} |"
            for x in r.label_rounds
        ]
        lines.append("")
    if not r.retractions:
        return [*lines, "No claim has been retracted."]
    lines += [
        f"- **Retracted** {text(x.claim)} claim of ticket {text(x.ticket_id)} "
        f"(run {text(x.run_id)}), "
        f"challenge {text(x.challenge_id)}: {text(x.reason)}"
        f"{' — the best was moved back' if x.demoted else ''}"
        for x in r.retractions
    ]
    return lines


# -- audit and LLM -------------------------------------------------------------------------------


def _audit(r: RunReport) -> list[str]:
    a = r.audit
    if a is None:
        return ["The audit log was not verified."]
    more = (
        f" (and {len(a.problems) - PROBLEMS_SHOWN} more: `segfactory audit verify`)"
        if len(a.problems) > PROBLEMS_SHOWN
        else ""
    )
    chain = "verified" if a.ok else "FAILED: " + text("; ".join(a.problems[:PROBLEMS_SHOWN])) + more
    window = (
        "no unanchored window"
        if a.unanchored_from is None
        else f"records from seq {a.unanchored_from} on came after it; the run's end anchors them "
        "(`segfactory audit verify` shows whether it did)"
    )
    return [
        f"- chain: {chain}; {a.records} records ({a.run_records} in this run), head seq {a.head_seq}",
        f"- anchor in the gate's ledger at seq {a.anchor_seq}; {window}",
        f"- protected-read attempts: {a.protected_read_attempts}; path escapes: {a.path_escape_attempts}; "
        f"`audit check` findings: {a.findings}",
        *_findings(a),
    ]


FINDINGS_SHOWN = 50  # listed in report.md; the rest are counted (report.json keeps more, `audit check` all)


def _findings(a: AuditSummary) -> list[str]:
    """This run's findings, one line each with its ticket, and the tickets held for them."""
    if not a.run_findings_total:
        return ["- findings in this run: none"]
    held = ", ".join(text(t) for t in a.held_for_findings) or "none"
    lines = [f"- findings in this run: {a.run_findings_total}; tickets held for a person: {held}"]
    for f in a.run_findings[:FINDINGS_SHOWN]:
        pattern = f" (matches {code(f.pattern)})" if f.pattern else ""
        lines.append(
            f"  - ticket {code(f.ticket_id or '-')}: {f.event} {code(f.path)}{pattern} (seq {f.seq})"
        )
    if a.run_findings_total > FINDINGS_SHOWN:
        lines.append(
            f"  - and {a.run_findings_total - FINDINGS_SHOWN} more: `segfactory audit check` lists them all"
        )
    return lines


def _llm(r: RunReport) -> list[str]:
    u = r.llm_usage
    if not u.calls and not u.attempts:
        return ["No LLM calls were made."]
    cost = f"${u.cost_usd:.4f}" if u.cost_known else "unknown (unlisted model)"
    return [
        f"- calls {u.calls}, attempts {u.attempts}, "
        f"tokens in {u.input_tokens} / out {u.output_tokens}, "
        f"latency {u.latency_s:.1f} s, cost {cost}",
    ]


__all__ = ["Block", "Section", "render_markdown", "sections", "title"]
