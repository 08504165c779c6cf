"""What the run did not do, and the caveats on what it did, each derived from the run's records.

Every line here is computed from a ``RunReport`` field: the tickets (their arms, kinds, lineage and
verdicts), the headline (promotions and milestones), the milestone, the gate's tiers, the plots and
the run record (proposer, code agent, compare arm). A line whose fact is not in the record is not
written; none is a fixed sentence that could outlive the code it describes.
"""

from __future__ import annotations

from agents._report_records import RunReport, TicketRow
from agents._report_text import code, sha_text, text
from gate.milestones import MILESTONE_TIERS, REAL_TIERS
from segfactory.records import Arm, TicketKind

CONTROL_ARMS = (Arm.SWEEP_TPE, Arm.SWEEP_RANDOM, Arm.AA, Arm.NNUNET)  # arms that are controls, not the agent


def did_not_do(r: RunReport) -> list[str]:
    """The section's bullets, in a fixed order; each present only when its fact holds."""
    return [
        *_no_llm(r),
        *_no_code(r),
        *_no_control(r),
        *_unscored_tiers(r),
        *_no_trained_start(r),
        *_robustness(r),
        *_curves(r),
        *_nothing_promoted(r),
        *_not_run(r),
    ]


def _no_llm(r: RunReport) -> list[str]:
    if r.proposer != "rules":
        return []
    return [
        "- **No LLM was configured.** The agent arm was the `rules` proposer: the dev analysis's "
        "recommendations, in order, as tickets. No hypothesis here was written by a language model."
    ]


def _no_code(r: RunReport) -> list[str]:
    if any(t.kind == TicketKind.CODE for t in r.tickets):
        return []
    if r.code_agent:
        return ["- No code ticket ran, though the code-editing agent was on (`run --code-agent`)."]
    return [
        "- No code ticket ran; the code-editing agent was off (`segfactory run --code-agent` turns it on)."
    ]


def _no_control(r: RunReport) -> list[str]:
    if any(t.arm in CONTROL_ARMS for t in r.tickets):
        return []
    if r.fill_budget:
        return [
            "- No control arm trained in this run: it is an agent arm of `segfactory compare`, which "
            "runs each other arm (a sweep, nnU-Net) as a run of its own."
        ]
    return [
        "- No control arm (a sweep, A/A or nnU-Net) trained in this run "
        "(`segfactory compare`, `segfactory aa`)."
    ]


def _unscored_tiers(r: RunReport) -> list[str]:
    m = r.milestone
    if m is None:
        return [
            "- No milestone was scored: no tier held back for people (sealed, never-queried) scored the best."
        ]
    if m.error:
        return [f"- The gate refused the milestone, so no held-back tier scored the best: {text(m.error)}"]
    lines = []
    for tier in MILESTONE_TIERS:
        block = m.tiers.get(tier)
        if block is not None:
            if block.error:
                lines.append(f"- The {tier} tier was not scored: {text(block.error)}")
            continue
        lines.append(f"- The {tier} tier was not scored{_why_unscored(r, tier)}.")
    return lines


def _why_unscored(r: RunReport, tier: str) -> str:
    if r.gate_tiers is None:
        return ""
    if tier not in r.gate_tiers:
        added = (
            " (`segfactory gate add-real` adds one from labelled real images)" if tier in REAL_TIERS else ""
        )
        return f": the gate holds no {tier} tier{added}"
    return (
        f": the gate holds one, but this run's milestone did not score it (`segfactory gate milestone "
        f"--run {text(r.run_id)} --tiers {tier}` does)"
    )


def _no_trained_start(r: RunReport) -> list[str]:
    planned = [t for t in r.tickets if t.built_on is not None]
    if not planned or any(t.built_on_ticket is not None for t in planned):
        return []
    parents = sorted({t.built_on for t in planned if t.built_on})
    classical = r.headline.classical.sha256 if r.headline.classical else None
    which = "is the classical detector" if parents == [classical] else "has no recorded training config"
    config = code(r.base_config) if r.base_config else "the run's base config"
    return [
        f"- No ticket started from a trained model: {_all(len(planned))} patched {config}, because the best "
        f"they built on ({', '.join(sha_text(p) for p in parents)}) {which}."
    ]


def _robustness(r: RunReport) -> list[str]:
    trained = [t for t in r.tickets if t.dev_metrics]
    if not trained:
        return []
    gated = [t for t in trained if t.tier is not None]
    where = (
        f"only inside the gate's verdicts, for the {len(gated)} of {len(trained)} that it scored"
        if gated
        else "nowhere: no ticket reached the gate"
    )
    return [
        f"- No perturbation score was measured for {_the(len(trained))} that trained: the dev "
        "numbers are on clean images, and robustness (`robust` in `policies/win_rule.yaml`) was "
        f"checked {where}."
    ]


def _curves(r: RunReport) -> list[str]:
    if "curves" not in r.plots:
        return []
    return ["- The tickets' learning curves are the sandboxed worker's own report, not host evidence."]


def _nothing_promoted(r: RunReport) -> list[str]:
    return (
        []
        if r.counts.get("promoted", 0)
        else ["- Nothing was promoted: the current best is unchanged by this run."]
    )


def _not_run(r: RunReport) -> list[str]:
    n = len(r.not_run)
    return [f"- {_tickets(n)} in the queue did not run before the budget was spent."] if n else []


def _tickets(n: int) -> str:
    return f"{n} ticket" if n == 1 else f"{n} tickets"


def _all(n: int) -> str:
    return "the one ticket" if n == 1 else f"all {n} tickets"


def _the(n: int) -> str:
    return "the one ticket" if n == 1 else f"the {n} tickets"


def starts(rows: list[TicketRow]) -> list[str]:
    """What the tickets built on, when some built on a trained model: ``r0-t003's config ×5``."""
    planned = [t for t in rows if t.built_on is not None]
    if not any(t.built_on_ticket for t in planned):
        return []
    tally: dict[str, int] = {}
    for t in planned:
        name = f"{text(t.built_on_ticket)}'s config" if t.built_on_ticket else "the base config"
        key = f"{name} ({sha_text(t.built_on)})"
        tally[key] = tally.get(key, 0) + 1
    return [f"- tickets built on: {'; '.join(f'{k} ×{n}' for k, n in tally.items())}"]


__all__ = ["CONTROL_ARMS", "did_not_do", "starts"]
