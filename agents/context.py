"""The proposer's context: an allowlist, and nothing else (trust rule 9).

A :class:`ProposerContext` holds the dev analysis (summary and recommendations) and the
history of coarse verdicts. :func:`build_context` accepts only those types and copies only the
allowlisted fields, so a report, milestone, audit record or any score that is not part of the
dev analysis cannot reach a prompt through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from analysis.report import AnalysisReport
from segfactory.records import Arm, CoarseVerdict, Recommendation, Ticket, Verdict

MAX_HISTORY_ENTRIES = 200  # past this: only the most recent entries are kept, and `history_truncated` says so
MAX_SUMMARY_CHARS = 8000  # past this: DevAnalysis refuses the summary (ValueError)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1


class DevAnalysis(_Frozen):
    """The dev-only analysis the proposer may see: a summary and its recommendations."""

    summary: str = Field(max_length=MAX_SUMMARY_CHARS)
    recommendations: tuple[Recommendation, ...] = ()

    @classmethod
    def from_report(cls, report: Any) -> DevAnalysis:
        """A summary of an ``analysis.report.AnalysisReport`` (dev only) and its recommendations."""

        if not isinstance(report, AnalysisReport):
            raise TypeError(f"expected analysis.report.AnalysisReport, got {type(report).__name__}")
        return cls(
            summary=_summary(report)[:MAX_SUMMARY_CHARS], recommendations=tuple(report.recommendations)
        )


SUMMARY_ROWS = 5  # problems, confirmed slices and notes quoted in the summary, each


def _summary(report: Any) -> str:
    """Dev facts only: counts, overall dev metrics, the main problems, confirmed slices, notes."""
    overall = ", ".join(f"{k}={v:.3f}" for k, v in sorted(report.overall.items()))
    lines = [f"dev: {report.n_images} images, {report.n_defects} voids; overall {overall}"]
    lines += [f"problem: {p.text}" for p in report.problems[:SUMMARY_ROWS]]
    lines += [
        f"slice {f.name}: n={f.n}, score {f.score:.3f} vs {f.complement:.3f} elsewhere"
        for f in report.findings[:SUMMARY_ROWS]
    ]
    if report.train_dev_gap is not None:
        lines.append(f"train-dev gap: {report.train_dev_gap:.3f}")
    lines += [f"note: {n}" for n in report.notes[:SUMMARY_ROWS]]
    return "\n".join(lines)


def crop_paths(report: Any, root: Path) -> list[Path]:
    """The report's error-crop PNGs (dev), as attachments for an LLM proposer."""
    return [root / c for c in report.crops]


class VerdictEntry(_Frozen):
    """One line of verdict history: what was tried and the gate's coarse answer."""

    ticket_id: str
    arm: Arm
    hypothesis: str
    # the ticket's change as it was (a config patch, files, a data spec): shown, never interpreted;
    # ``object`` validates and dumps exactly as the ticket's own ``change`` does
    change: dict[str, object]
    tier: Literal["confirm-a", "confirm-b"] | None  # None: a dev loss, never sent to the gate
    verdict: Verdict | Literal["DEV_LOSS", "FAILED", "CONTROL"]  # CONTROL: a default-action re-run

    @classmethod
    def from_verdict(cls, ticket: Ticket, verdict: CoarseVerdict) -> VerdictEntry:
        if not isinstance(ticket, Ticket) or not isinstance(verdict, CoarseVerdict):
            raise TypeError("VerdictEntry.from_verdict takes a Ticket and a CoarseVerdict")
        return cls(
            ticket_id=ticket.id,
            arm=ticket.arm,
            hypothesis=ticket.hypothesis,
            change=ticket.change,
            tier=verdict.tier,
            verdict=verdict.verdict,
        )

    @classmethod
    def not_submitted(cls, ticket: Ticket, outcome: Literal["DEV_LOSS", "FAILED", "CONTROL"]) -> VerdictEntry:
        return cls(
            ticket_id=ticket.id,
            arm=ticket.arm,
            hypothesis=ticket.hypothesis,
            change=ticket.change,
            tier=None,
            verdict=outcome,
        )


class ProposerContext(_Frozen):
    """Everything a proposer sees. Built only by :func:`build_context`."""

    analysis: DevAnalysis
    history: tuple[VerdictEntry, ...] = ()
    history_truncated: bool = False
    # the current best's training config (a plain JSON copy): no score
    incumbent: dict[str, JsonValue] = Field(default_factory=dict)
    incumbent_sha256: str = ""  # which model that is (a hash names it; it holds no score)
    incumbent_has_weights: bool = False  # a ticket may continue from its weights (continues: incumbent)


def build_context(
    analysis: DevAnalysis,
    history: Sequence[VerdictEntry],
    incumbent: dict[str, JsonValue] | None = None,
    *,
    incumbent_sha256: str = "",
    incumbent_has_weights: bool = False,
) -> ProposerContext:
    """The one way to make a proposer context; any other input type is a ``TypeError``.

    ``incumbent`` is the training config every ticket patches (what it is changed from); a config
    holds hyperparameters and names, never a score, so it may be shown to a proposer.
    """
    if type(analysis) is not DevAnalysis:
        raise TypeError(f"proposer context takes DevAnalysis, got {type(analysis).__name__}")
    entries = tuple(history)
    for entry in entries:
        if type(entry) is not VerdictEntry:
            raise TypeError(f"proposer history takes VerdictEntry items, got {type(entry).__name__}")
    truncated = len(entries) > MAX_HISTORY_ENTRIES
    return ProposerContext(
        analysis=analysis,
        history=entries[-MAX_HISTORY_ENTRIES:],
        history_truncated=truncated,
        incumbent=_config_only(incumbent or {}),
        incumbent_sha256=incumbent_sha256,
        incumbent_has_weights=incumbent_has_weights,
    )


MAX_INCUMBENT_CHARS = 8000  # the incumbent config as JSON; past this: ValueError (a config is small)


def _config_only(config: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A plain JSON copy of a training config (validated by its shape: scalars, lists, mappings)."""
    import json

    text = json.dumps(config, sort_keys=True, default=str)
    if len(text) > MAX_INCUMBENT_CHARS:
        raise ValueError(f"incumbent config is {len(text)} characters; at most {MAX_INCUMBENT_CHARS}")
    copied: dict[str, JsonValue] = json.loads(text)
    return copied
