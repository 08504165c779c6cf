"""Every later run report lists the home's labelling rounds and retracted claims."""

from __future__ import annotations

from pathlib import Path

from agents import report as rpt
from agents._report_md import render_markdown
from agents.challenge._records import ChallengeRecord, Claim, ClaimKind, Verdict
from agents.labelling._finetune import LABEL_RUN, ROUNDS_FILE, LabelRound
from agents.state import FactoryState
from segfactory.home import Home


def _round() -> LabelRound:
    return LabelRound(
        round="labels/v1",
        reviewed_version="labels/v2",
        proposer_sha256="ab" * 32,
        n_images=24,
        n_proposed=41,
        reviewed=6,
        kept=0,
        fixed=5,
        dropped=1,
        precision=0.244,
        human_seconds=7.2,
        human_minutes_per_image=0.02,
        labels_per_hour=2532.0,
        ticket_id="labels-ft1",
        status="DONE",
        dev_object_f1=0.423,
        proposer_dev_object_f1=0.166,
        dev_gain=0.257,
        gate_verdict="WIN",
    )


def _challenge(verdict: Verdict, ticket: str) -> ChallengeRecord:
    claim = Claim(
        kind=ClaimKind.COLLAPSE,
        ticket_id=ticket,
        run_id="r0",
        source="claims/c.json",
        claimed=0.1,
        reference=0.59,
        perturbation="blur",
        severity=5,
        value=1.5,
    )
    return ChallengeRecord(
        challenge_id=f"ch-{ticket}",
        claim=claim,
        seeds=[1, 2],
        conditions=[],
        diff={},
        range_checks=[],
        verdict=verdict,
        reasons=[f"{ticket}: did not re-derive"],
    )


def _rendered(records: rpt.HomeRecords | dict[str, list[rpt.RefusedDraft]]) -> str:
    """An otherwise empty run report carrying ``records``, as Markdown."""
    report = rpt.RunReport(
        run_id="r1",
        profile="demo",
        proposer="rules",
        backend="bwrap",
        stop_reason="done",
        started_at=1.0,
        ended_at=2.0,
        win_rule_sha256=None,
        tickets=[],
        not_run=[],
        approvals=[],
        counts=rpt.counts([], FactoryState(run_id="r1")),
        device_seconds=0.0,
        milestone=None,
        audit=None,
        llm_usage={},
        analysis_dir=None,
        **records,
    )
    return render_markdown(report)


def test_the_report_lists_the_homes_rounds_and_only_its_retracted_claims(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    people = home.people_dir(LABEL_RUN)
    people.mkdir(parents=True)
    (people / ROUNDS_FILE).write_text(_round().model_dump_json() + "\n")
    challenges = home.people_dir("r0") / "challenges"
    challenges.mkdir(parents=True)
    for verdict, ticket in ((Verdict.RETRACTED, "t-false"), (Verdict.UPHELD, "t-true")):
        (challenges / f"{ticket}.json").write_text(_challenge(verdict, ticket).model_dump_json())

    records = rpt.home_records(home)
    assert [r.round for r in records["label_rounds"]] == ["labels/v1"]
    assert [r.ticket_id for r in records["retractions"]] == ["t-false"]
    md = _rendered(records)
    assert "| labels/v1 | 6 | 0 / 5 / 1 | 0.244 |" in md and "| 0.257 | WIN |" in md
    assert "**Retracted** collapse claim of ticket t-false" in md and "t-true" not in md


def test_a_home_without_rounds_or_challenges_says_so(tmp_path: Path) -> None:
    records = rpt.home_records(Home(tmp_path / "empty"))
    assert records == {"label_rounds": [], "retractions": []}
    md = _rendered(records)
    assert "No labelling round has finished in this home" in md and "No claim has been retracted." in md


def test_the_report_lists_the_drafts_validation_refused(tmp_path: Path) -> None:
    from audit.log import AuditLog
    from segfactory.records import Actor

    home = Home(tmp_path / "home")
    home.audit.mkdir(parents=True)
    reason = "the generator cannot target the slice term 'shape=cluster'"
    with AuditLog(home, None) as log:
        for _ in range(2):  # refused at two propose steps: listed once
            log.append(
                Actor.SYSTEM.value,
                "ticket_invalid",
                {"ticket": {"hypothesis": "top up clusters", "kind": "data"}, "reasons": [reason]},
                run_id="r1",
            )
        log.append(
            Actor.SYSTEM.value,
            "ticket_invalid",
            {"ticket": {"hypothesis": "other run"}, "reasons": ["x"]},
            run_id="r2",
        )
    refused = rpt.refused_drafts(home, "r1")
    assert refused == [rpt.RefusedDraft(hypothesis="top up clusters", kind="data", reasons=[reason])]
    md = _rendered({"refused": refused})
    assert "refused before queueing" in md and reason in md and "other run" not in md
