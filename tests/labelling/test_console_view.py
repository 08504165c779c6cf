"""The console's /labels page lists finished labelling rounds and retracted claims (escaped)."""

from __future__ import annotations

from pathlib import Path

from agents.challenge import ChallengeRecord, Claim, Verdict
from agents.labelling import LABEL_RUN, LabelRound
from audit import AuditLog, MemoryAnchorStore
from segfactory.home import Home


def _round() -> LabelRound:
    return LabelRound(
        round="labels/v1",
        reviewed_version="labels/v2",
        proposer_sha256="a" * 64,
        n_images=24,
        n_proposed=300,
        reviewed=6,
        kept=1,
        fixed=4,
        dropped=1,
        precision=0.25,
        human_seconds=60.0,
        human_minutes_per_image=0.1667,
        labels_per_hour=300.0,
        ticket_id="label-labels-v2-0001",
        status="DONE",
        dev_object_f1=0.41,
        proposer_dev_object_f1=0.166,
        dev_gain=0.244,
        gate_verdict="WIN",
    )


def _retraction() -> ChallengeRecord:
    claim = Claim(
        kind="collapse",
        ticket_id="t-narrow",
        run_id="r1",
        source="claims/t-narrow.json",
        claimed=0.4,
        reference=0.97,
        perturbation="detector_blur",
        severity=3,
        value=1.5,
    )
    return ChallengeRecord(
        challenge_id="ch-0badf00d",
        claim=claim,
        seeds=[1, 2],
        conditions=[],
        diff={},
        range_checks=[],
        verdict=Verdict.RETRACTED,
        reasons=["the collapse is an artefact <script>alert(1)</script>"],
    )


def test_labels_page_shows_rounds_and_retractions(tmp_home: Path) -> None:
    from fastapi.testclient import TestClient

    from console import Auth, create_app

    home = Home(tmp_home)
    home.root.mkdir(parents=True)
    empty_log = AuditLog(home, MemoryAnchorStore())
    app = create_app(home, empty_log, auth=Auth("t"), anchor=lambda: (None, False), person="human:tester")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.get("/login", params={"token": "t"}, follow_redirects=False)
        before = client.get("/labels").text
        assert "No finished round" in before and "No claim has been retracted" in before
        people = home.people_dir(LABEL_RUN)
        people.mkdir(parents=True)
        (people / "rounds.jsonl").write_text(_round().model_dump_json() + "\n")
        challenges = home.people_dir("r1") / "challenges"
        challenges.mkdir(parents=True)
        (challenges / "ch-0badf00d.json").write_text(_retraction().model_dump_json())
        page = client.get("/labels").text
    empty_log.close()
    assert "<td>labels/v1</td><td>6</td><td>1 / 4 / 1</td>" in page and "<td>0.25</td>" in page
    assert "0.166 → 0.410" in page and "<td>WIN</td>" in page
    assert "ch-0badf00d" in page and "t-narrow" in page
    assert "&lt;script&gt;" in page and "<script>alert(1)" not in page
