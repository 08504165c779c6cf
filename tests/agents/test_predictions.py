"""Scored predictions: a recommendation against its parent, and against the default action."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents._predictions import Predictions, summary
from agents.incumbent import DEFAULT_ACTION_EVIDENCE
from segfactory.home import Home
from segfactory.layout import Lineage
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from synthetic import generate


@pytest.fixture
def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    dev = generate(30, 48, 4)
    models = {}

    def model(name: str, keep: float) -> Path:
        """A stand-in model file; the scorer finds the share of each mask it 'predicts' by name."""
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(name.encode())
        models[str(path)] = keep
        return path

    def scorer(path: Path, images: np.ndarray) -> np.ndarray:
        keep = models[str(path)]
        masks = dev.masks.astype(np.float32)
        cut = int(round(keep * len(masks)))
        masks[cut:] = 0  # finds the voids of the first share of images only
        return masks[:, None]

    home = Home(tmp_path / "home")
    home.root.mkdir()
    return Predictions(home, "p1", dev, 0.5, scorer), model, home


def _ticket(tid: str, evidence: list[str], effect: ExpectedEffect) -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="h",
        change={"epochs": 8},
        budget=Budget(device_seconds=60, epochs=8),
        expected_effect=effect,
        evidence=evidence,
        seed=1,
    )


def _lineage(tid: str, parent: str) -> Lineage:
    return Lineage(
        ticket_id=tid,
        run_id="p1",
        parent_sha256=parent,
        parent_fingerprint="p",
        config={},
        dataset="d/v1",
        dataset_hash="h",
        fingerprint=tid,
    )


def test_a_prediction_is_scored_against_its_parent_and_the_default_action_in_either_order(setup) -> None:  # type: ignore[no-untyped-def]
    predictions, model, home = setup
    parent, better, control = model("parent", 0.5), model("better", 0.9), model("control", 0.55)
    down = ExpectedEffect(metric="miss_rate", slice="all", direction=Direction.DOWN, size=0.2)
    rec = _ticket("p1-t002", ["recommendation:model-capacity-0"], down)
    row = predictions.after_ticket(rec, _lineage("p1-t002", "P"), better, parent)
    assert row is not None and row.held is True and row.observed_change < -0.2  # misses fell as predicted
    assert row.default is None  # no control has run for this parent yet
    default = _ticket("p1-t003", [DEFAULT_ACTION_EVIDENCE], down).model_copy(update={"change": {}})
    assert predictions.after_ticket(default, _lineage("p1-t003", "P"), control, parent) is None
    data = summary(home, "p1").as_json()
    scored = [r for r in data["rows"] if r["ticket_id"] == "p1-t002"][0]
    assert scored["default"]["held"] is False  # the seed re-run moved misses far less than predicted
    assert data["hit_rate"]["recommendation"]["n"] == 1 and data["hit_rate"]["recommendation"]["held"] == 1
    assert data["hit_rate"]["default"]["n"] == 1 and data["hit_rate"]["default"]["held"] == 0
    # a later recommendation on the same parent is scored against the control at once
    worse = _ticket("p1-t004", ["recommendation:regularise-0"], down)
    row = predictions.after_ticket(worse, _lineage("p1-t004", "P"), model("worse", 0.3), parent)
    assert row is not None and row.held is False and row.default is not None


def test_a_prediction_the_dev_split_cannot_measure_is_recorded_not_guessed(setup) -> None:  # type: ignore[no-untyped-def]
    predictions, model, home = setup
    effect = ExpectedEffect(metric="object_f1", slice="size<3", direction=Direction.UP, size=0.1)
    row = predictions.after_ticket(
        _ticket("p1-t005", ["recommendation:x-0"], effect),
        _lineage("p1-t005", "P"),
        model("a", 0.9),
        model("b", 0.5),
    )
    assert row is not None and row.held is None and "cannot be measured" in row.reason
    assert summary(home, "p1").as_json()["hit_rate"]["recommendation"]["n"] == 0


def test_a_replicate_does_not_score_its_originals_prediction_twice(setup) -> None:  # type: ignore[no-untyped-def]
    predictions, model, home = setup
    down = ExpectedEffect(metric="miss_rate", slice="all", direction=Direction.DOWN, size=0.2)
    rec = _ticket("p1-t006", ["recommendation:model-capacity-0"], down)
    parent = model("parent2", 0.5)
    assert predictions.after_ticket(rec, _lineage("p1-t006", "Q"), model("c", 0.9), parent) is not None
    rep = rec.model_copy(update={"id": "p1-t006-rep", "replicate_of": "p1-t006"})
    assert predictions.after_ticket(rep, _lineage("p1-t006-rep", "Q"), model("c2", 0.9), parent) is None
    assert summary(home, "p1").as_json()["hit_rate"]["recommendation"]["n"] == 1


def test_a_scored_prediction_records_the_share_of_its_shortfall_it_recovered(setup) -> None:  # type: ignore[no-untyped-def]
    """The realised share comes from the analysis the recommendation was made on (its shortfall);
    the home's shares per rule feed the next prediction, and the run's calibration rows say so."""
    import json

    from agents._predictions import calibration, measured_shares
    from segfactory.layout import RunLayout

    predictions, model, home = setup
    down = ExpectedEffect(metric="miss_rate", slice="all", direction=Direction.DOWN, size=0.2)
    analysis = RunLayout(home, "p1").analysis_dir("P" * 64)
    analysis.mkdir(parents=True)
    made = {"id": "model-capacity-0", "predicted_effect": down.model_dump(mode="json")}
    made["evidence"] = {"prediction": {"shortfall": 0.4}}
    (analysis / "report.json").write_text(json.dumps({"recommendations": [made]}))
    rec = _ticket("p1-t010", ["recommendation:model-capacity-0"], down)
    row = predictions.after_ticket(rec, _lineage("p1-t010", "P" * 64), model("b10", 0.9), model("p10", 0.5))
    assert row is not None and row.observed_change is not None and row.rule == "model-capacity"
    assert row.realised_share == pytest.approx(-row.observed_change / 0.4, abs=1e-6)
    assert measured_shares(home) == {"model-capacity": [row.realised_share]}
    (cal,) = calibration(home, "p1")
    assert (cal.rule, cal.scored, cal.measured_in_home, cal.prior_share) == ("model-capacity", 1, 1, 0.5)
    assert cal.mean_predicted == 0.2 and cal.mean_measured == pytest.approx(-row.observed_change)
    assert cal.next_share == pytest.approx(min(1.0, (3 * 0.5 + row.realised_share) / 4))
    # a ticket that predicts another metric than its recommendation learns nothing for the rule
    other = ExpectedEffect(metric="object_recall", slice="all", direction=Direction.UP, size=0.2)
    own = _ticket("p1-t011", ["recommendation:model-capacity-0"], other)
    row = predictions.after_ticket(own, _lineage("p1-t011", "P" * 64), model("b11", 0.9), model("p11", 0.5))
    assert row is not None and row.observed_change is not None and row.realised_share is None
