"""Markdown of the run report (the HTML is rendered from it by ``analysis.render.to_html``)."""

from __future__ import annotations

import json
import time
from typing import Any

NOT_MEASURED = "n/a"


def _f(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else NOT_MEASURED


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else NOT_MEASURED


def render_markdown(r: Any) -> str:
    """The whole report, section by section."""
    lines = [
        f"# Run {r.run_id}",
        "",
        f"- profile `{r.profile}`, proposer `{r.proposer}`, sandbox backend `{r.backend}`",
        *(
            [f"- training config `{r.base_config}`" + (f": {r.sized_note}" if r.sized_note else "")]
            if r.base_config
            else []
        ),
        f"- started {_when(r.started_at)}, ended {_when(r.ended_at)}; "
        f"stopped because: {r.stop_reason or 'done'}",
        f"- win rule sha256 `{(r.win_rule_sha256 or NOT_MEASURED)[:16]}` (pinned at start)",
        f"- device time spent {r.device_seconds:.0f} s"
        + (
            f"; tickets trained {r.concurrency} at a time, each charged its own sandbox time"
            if r.concurrency > 1
            else ""
        ),
        "",
    ]
    for section in (
        _counts,
        _rounds,
        _predictions,
        _tickets,
        _plots,
        _milestone,
        _approvals,
        _labelling,
        _audit,
        _llm,
        _did_not_do,
    ):
        lines += section(r)
    return "\n".join(lines) + "\n"


def _counts(r: Any) -> list[str]:
    c = r.counts
    return [
        "## Outcome",
        "",
        f"- tickets run: {c['tickets']} ({c['replicates']} replicates); dev losses {c['dev_losses']}, "
        f"failed {c['failed']}",
        f"- dev wins: {c['dev_wins']}; gate queries: {c['gate_queries']}",
        f"- wins that survived confirm-a: {c['survived_confirm_a']}",
        f"- promoted (confirm-a WIN and a replicate WIN on confirm-b): {c['promoted']}",
        "",
    ]


def _rounds(r: Any) -> list[str]:
    """Weakness, fix tried, result: one block per analysis of a best."""
    if not r.rounds:
        return []
    lines = [
        "## Rounds: weakness, fix tried, result",
        "",
        "Each round analyses the current best on dev; its tickets patch that best. Fixes that did nothing "
        "or made things worse are listed too.",
        "",
    ]
    for rnd in r.rounds:
        lines += [
            f"### Round {rnd['round']} (best `{rnd['incumbent'][:12]}`)",
            "",
            f"Weakness: {rnd['weakness'] or 'none named'}",
            "",
        ]
        if not rnd["tried"]:
            lines += ["No ticket ran on this best.", ""]
            continue
        lines += [
            "| ticket | fix tried | dev object F1 | best then | predicted | measured | held | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in rnd["tried"]:
            p = t.get("predicted") or {}
            pred = f"{p.get('metric')} on {p.get('slice')} {p.get('direction')} {p.get('size')}" if p else "-"
            measured = f"{t['observed_change']:+.3f}" if t.get("observed_change") is not None else "-"
            held = "-" if t.get("held") is None else ("yes" if t["held"] else "no")
            lines.append(
                f"| {t['ticket_id']} | {t['hypothesis'].replace('|', '/')[:70]} | {_f(t['dev_object_f1'])} | "
                f"{_f(t['best_dev_object_f1'])} | {pred.replace('|', '/')} | {measured} | {held} | "
                f"{t['verdict']} |"
            )
        lines.append("")
    return lines


def _predictions(r: Any) -> list[str]:
    rates = r.hit_rate or {}
    lines = ["## Scored predictions", ""]
    if not any((rates.get(arm) or {}).get("n") for arm in ("recommendation", "default", "sealed")):
        lines.append("No recommendation's prediction was scored in this run.")
    for arm, label in (
        ("recommendation", "recommendations (dev)"),
        ("default", "default action at the same cost (fresh-seed re-run of the best)"),
        ("sealed", "promoted recommendations (sealed)"),
    ):
        a = rates.get(arm)
        if a and not a.get("n"):
            lines.append(f"- hit rate of {label}: none scored")
        elif a:
            lines.append(
                f"- hit rate of {label}: {a['held']}/{a['n']} = {a['rate']:.2f} "
                f"[{a['low']:.2f}, {a['high']:.2f}] (Wilson 95%)"
            )
    if r.not_executable:
        lines += ["", "Recommendations that became no ticket:", ""]
        lines += [f"- {n['recommendation_id']}: {n['reason'][:240]}" for n in r.not_executable]
    return [*lines, ""]


def _tickets(r: Any) -> list[str]:
    lines = [
        "## Every ticket",
        "",
        "All tickets, including the ones that did nothing or made things worse. Dev numbers are "
        "computed on the host from the copied-out model (confined scorer); verdicts are the gate's.",
        "",
        "| ticket | arm | kind | hypothesis | change | status | dev object F1 | best then | dev dice | "
        "device s | verdict | decision |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in r.tickets:
        hyp = t.hypothesis.replace("|", "/")[:90]
        change = json.dumps(t.change, sort_keys=True).replace("|", "/")[:80]
        verdict = f"{t.verdict} ({t.tier})" if t.tier else t.verdict
        decision = t.decision or ("-" if t.replicate_of is None else f"replicate of {t.replicate_of}")
        lines.append(
            f"| {t.ticket_id} | {t.arm} | {t.kind} | {hyp} | `{change}` | {t.status} | "
            f"{_f(t.dev_metrics.get('object_f1'))} | {_f(t.best_dev_object_f1)} | "
            f"{_f(t.dev_metrics.get('dice'))} | {t.device_seconds:.0f} | {verdict} | {decision} |"
        )
    lines.append("")
    for t in r.tickets:
        if t.reason or t.decision_reason:
            lines.append(f"- {t.ticket_id}: {t.reason or ''} {t.decision_reason or ''}".rstrip())
    if r.not_run:
        lines += ["", "Queued but not run (budget spent):", ""]
        lines += [f"- {q['id']}: {q['hypothesis'][:100]}" for q in r.not_run]
    if r.refused:
        lines += ["", "Proposed but refused before queueing (validation):", ""]
        lines += [
            f'- {q["kind"]} ticket "{q["hypothesis"][:100]}", refused: {"; ".join(q["reasons"])[:300]}'
            for q in r.refused
        ]
    return [*lines, ""]


def _plots(r: Any) -> list[str]:
    titles = {
        "dev_f1": "Dev object F1 per ticket (green: dev win) against the best at the time",
        "errors": "Error types of the starting best on dev",
        "slices": "Slices of the starting best on dev",
        "learning_curve": "Learning curve of the starting best",
        "curves": (
            "Learning curves of the tickets (train loss as the sandboxed worker reported it; not evidence)"
        ),
    }
    lines = ["## Plots", ""]
    for key, path in r.plots.items():
        lines += [f"{titles.get(key, key)}:", "", f"![{key}]({path})", ""]
    if "curves" not in r.plots:
        lines += ["No ticket reported a learning curve.", ""]
    if r.analysis_dir:
        lines += [f"The full dev analysis of the starting best: `{r.analysis_dir}/report.html`.", ""]
    return lines


def _milestone(r: Any) -> list[str]:
    m = r.milestone
    lines = ["## Milestone: sealed and never-queried tiers", ""]
    if not m:
        return [*lines, "No milestone was scored.", ""]
    if m.get("error"):
        return [*lines, f"The milestone was refused by the gate: {m['error']}", ""]
    names = {
        sha: ("current best" if sha == m.get("best_sha256") else "baseline") for sha in m.get("models", {})
    }
    lines += [
        "| tier | version | model | object F1 | 90% interval | pixel IoU | images |",
        "|---|---|---|---|---|---|---|",
    ]
    for tier, block in m.get("tiers", {}).items():
        if block.get("error"):
            lines.append(f"| {tier} | v{block.get('version')} | not scored: {block['error']} | | | | |")
        for sha, s in block.get("models", {}).items():
            f1 = s.get("object_f1", {}) if isinstance(s, dict) else {}
            lines.append(
                f"| {tier} | v{block.get('version')} | {names.get(sha, sha[:12])} `{sha[:10]}` | "
                f"{_f(f1.get('estimate'))} | [{_f(f1.get('low'))}, {_f(f1.get('high'))}] | "
                f"{_f(s.get('pixel_iou'))} | {s.get('n_images', NOT_MEASURED)} |"
            )
    return [*lines, "", *_gap(m), ""]


def _gap(m: dict[str, Any]) -> list[str]:
    """sealed minus never-queried for the current best, and whether their intervals overlap."""
    best = m.get("best_sha256")
    try:
        sealed = m["tiers"]["sealed"]["models"][best]["object_f1"]
        never = m["tiers"]["never-queried"]["models"][best]["object_f1"]
    except (KeyError, TypeError):
        return ["Never-queried gap: not measured (a tier or the best's score is missing)."]
    overlap = sealed["low"] <= never["high"] and never["low"] <= sealed["high"]
    return [
        f"Never-queried gap (sealed − never-queried object F1 of the current best): "
        f"{sealed['estimate'] - never['estimate']:+.4f}; the 90% intervals "
        f"{'overlap' if overlap else 'do NOT overlap'}. Milestone scores on sealed guide people's "
        "choices; never-queried is read only for this comparison, so a sealed score clearly above "
        "never-queried would mean the milestones themselves are being overfit."
    ]


def _approvals(r: Any) -> list[str]:
    lines = ["## Data requests (approvals queue)", ""]
    if not r.approvals:
        return [*lines, "No data requests were made.", ""]
    lines += [f"- {a['id']}: {a['status']} — {a['hypothesis'][:100]}" for a in r.approvals]
    return [
        *lines,
        "",
        "Decide pending ones with `segfactory approvals approve|deny ID`. An approved request "
        "becomes a data ticket at its run's next propose step; once the run has finished it does not "
        "run (carrying it into a new run is not built yet).",
        "",
    ]


def _labelling(r: Any) -> list[str]:
    """The home's labelling rounds and retracted claims (they outlive the run that made them)."""
    lines = ["## Labelling rounds and retracted claims (this home, so far)", ""]
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
            f"| {x['round']} | {x['reviewed']} | {x['kept']} / {x['fixed']} / {x['dropped']} | "
            f"{_f(x['precision'])} | {_f(x['human_minutes_per_image'])} | {_f(x['labels_per_hour'], 0)} | "
            f"{_f(x['dev_object_f1'])} | {_f(x['dev_gain'])} | {x['gate_verdict'] or x['status']} |"
            for x in r.label_rounds
        ]
        lines.append("")
    if not r.retractions:
        return [*lines, "No claim has been retracted.", ""]
    lines += [
        f"- **Retracted** {x['claim']} claim of ticket {x['ticket_id']} (run {x['run_id']}), challenge "
        f"{x['challenge_id']}: {x['reason']}{' — the best was moved back' if x['demoted'] else ''}"
        for x in r.retractions
    ]
    return [*lines, ""]


def _audit(r: Any) -> list[str]:
    a = r.audit
    if a is None:
        return ["## Audit", "", "The audit log was not verified.", ""]
    chain = "verified" if a.ok else "FAILED: " + "; ".join(a.problems[:3])
    return [
        "## Audit",
        "",
        f"- chain: {chain}; {a.records} records ({a.run_records} in this run), head seq {a.head_seq}",
        f"- anchor in the gate's ledger at seq {a.anchor_seq}; unanchored window from "
        f"{a.unanchored_from if a.unanchored_from is not None else '(none)'} (the run end anchors the rest)",
        f"- protected-read attempts: {a.protected_read_attempts}; path escapes: {a.path_escape_attempts}; "
        f"`audit check` findings: {a.findings}",
        *_findings(a),
        "",
    ]


FINDINGS_SHOWN = 50  # listed in report.md; the rest are counted (report.json keeps more, `audit check` all)


def _findings(a: Any) -> list[str]:
    """This run's findings, one line each with its ticket, and the tickets held for them."""
    total = getattr(a, "run_findings_total", 0)
    if not total:
        return ["- findings in this run: none"]
    held = ", ".join(a.held_for_findings) or "none"
    lines = [f"- findings in this run: {total}; tickets held for a person: {held}"]
    for f in a.run_findings[:FINDINGS_SHOWN]:
        pattern = f" (matches `{_plain(f.pattern)}`)" if f.pattern else ""
        lines.append(
            f"  - ticket `{_plain(f.ticket_id or '-')}`: {f.event} `{_plain(f.path)}`{pattern} (seq {f.seq})"
        )
    if total > FINDINGS_SHOWN:
        lines.append(f"  - and {total - FINDINGS_SHOWN} more: `segfactory audit check` lists them all")
    return lines


PLAIN_MAX_CHARS = 200  # of one sandbox-reported string in report.md


def _plain(text: str) -> str:
    """Sandbox text made safe for Markdown and a terminal: control characters and backticks escaped."""
    out = "".join(c if c.isprintable() and c != "`" else f"\\x{ord(c):02x}" for c in text)
    return out if len(out) <= PLAIN_MAX_CHARS else out[:PLAIN_MAX_CHARS] + "…"


def _llm(r: Any) -> list[str]:
    u = r.llm_usage
    if not u.get("calls") and not u.get("attempts"):
        return ["## LLM usage", "", "No LLM calls were made.", ""]
    cost = f"${u.get('cost_usd', 0):.4f}" if u.get("cost_known", True) else "unknown (unlisted model)"
    return [
        "## LLM usage",
        "",
        f"- calls {u.get('calls', 0)}, attempts {u.get('attempts', 0)}, "
        f"tokens in {u.get('input_tokens', 0)} / out {u.get('output_tokens', 0)}, "
        f"latency {u.get('latency_s', 0):.1f} s, cost {cost}",
        "",
    ]


def _did_not_do(r: Any) -> list[str]:
    lines = ["## What this run did not do", ""]
    if r.proposer == "rules":
        lines.append(
            "- **No LLM was configured.** The agent arm was the `rules` proposer: the dev analysis's "
            "recommendations, in order, as tickets. No hypothesis here was written by a language model."
        )
    lines += [
        "- No code-editing (`agent-code`) tickets ran; no sweep or A/A control ran in this run "
        "(`segfactory compare`, `segfactory aa`).",
        "- The real-holdout tier was not scored (none is registered unless a person adds one).",
        "- Tickets start from the profile's base config, not from the promoted model's config.",
        "- Perturbation robustness was not measured for the tickets; their learning curves are the "
        "sandbox's own report, not host evidence.",
    ]
    if r.counts.get("promoted", 0) == 0:
        lines.append("- Nothing was promoted: the current best is unchanged by this run.")
    if r.not_run:
        lines.append(f"- {len(r.not_run)} queued ticket(s) did not run before the budget was spent.")
    return [*lines, ""]
