"""Trust rule 9: the proposer context is built from an allowlist and only from allowed types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agents.context import MAX_HISTORY_ENTRIES, DevAnalysis, ProposerContext, VerdictEntry, build_context
from segfactory.records import (
    Arm,
    Budget,
    CoarseVerdict,
    Direction,
    ExpectedEffect,
    Ticket,
    TicketKind,
    Verdict,
)


def _ticket(tid: str = "t1") -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="lower lr",
        change={"lr": 1e-4},
        budget=Budget(device_seconds=60, epochs=2),
        expected_effect=ExpectedEffect(metric="iou", direction=Direction.UP, size=0.01),
        seed=3,
    )


def test_context_fields_are_the_allowlist() -> None:
    assert set(ProposerContext.model_fields) == {
        "schema_version",
        "analysis",
        "history",
        "history_truncated",
        "incumbent",
        "incumbent_sha256",  # a hash naming the best: no score
        "incumbent_has_weights",  # whether a ticket may continue from its weights: no score
    }
    assert set(DevAnalysis.model_fields) == {"schema_version", "summary", "recommendations"}
    assert set(VerdictEntry.model_fields) == {
        "schema_version",
        "ticket_id",
        "arm",
        "hypothesis",
        "change",
        "tier",
        "verdict",
    }


def test_builder_refuses_other_types() -> None:
    analysis = DevAnalysis(summary="s")
    with pytest.raises(TypeError, match="DevAnalysis"):
        build_context({"summary": "s", "sealed_score": 0.9137}, [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="VerdictEntry"):
        build_context(analysis, [{"ticket_id": "t", "score": 0.9137}])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        ProposerContext(analysis=analysis, people_report="milestone 0.9137")  # type: ignore[call-arg]


def test_history_carries_coarse_verdicts_only_and_is_bounded() -> None:
    ticket = _ticket()
    verdict = CoarseVerdict(ticket_id="t1", tier="confirm-a", verdict=Verdict.NO_WIN, queries_left=9)
    entries = [VerdictEntry.from_verdict(ticket, verdict)] * (MAX_HISTORY_ENTRIES + 5)
    ctx = build_context(DevAnalysis(summary="s"), entries)
    assert len(ctx.history) == MAX_HISTORY_ENTRIES and ctx.history_truncated
    assert "queries_left" not in ctx.model_dump_json()
    dev_loss = VerdictEntry.not_submitted(ticket, "DEV_LOSS")
    assert dev_loss.tier is None and dev_loss.verdict == "DEV_LOSS"


def test_from_report_takes_only_an_analysis_report() -> None:
    from analysis.report import AnalysisReport

    with pytest.raises(TypeError):
        DevAnalysis.from_report(object())
    rec = DevAnalysis(summary="x", recommendations=()).recommendations
    report = AnalysisReport(
        model_sha256="ab" * 32,
        data="dev",
        n_images=40,
        n_defects=55,
        threshold=0.5,
        overall={"dice": 0.61},
        error_counts={},
        problems=[],
        slices=[],
        n_slices_tested=0,
        n_slices_below_support=0,
        findings=[],
        recommendations=list(rec),
        notes=["small voids missed"],
        train_dev_gap=0.04,
    )
    analysis = DevAnalysis.from_report(report)
    assert "40 images" in analysis.summary and "dice=0.610" in analysis.summary
    assert "small voids missed" in analysis.summary and "ab" * 32 not in analysis.summary
