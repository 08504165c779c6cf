"""Rules in policies/recommend.yaml turn analysis inputs into falsifiable recommendations."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.labels import LabelEstimate
from analysis.recommend import Inputs, load_policy, recommend
from analysis.slices import SliceRow
from segfactory.errors import PolicyError
from segfactory.records import Direction, Recommendation, TicketKind


def _row(
    name: str, attrs: list[str], score: float, complement: float, n: int = 120, coverage: float | None = None
) -> SliceRow:
    return SliceRow(
        name=name,
        unit="defect",
        attributes=attrs,
        n=n,
        score=score,
        low=score - 0.05,
        high=score + 0.05,
        complement=complement,
        effect=score - complement,
        discovery_n=n // 2,
        discovery_effect=score - complement,
        p_value=1e-4,
        q_value=1e-3,
        discovered=True,
        confirm_n=n // 2,
        confirm_effect=score - complement,
        confirm_p=1e-3,
        confirmed=True,
        train_coverage=coverage,
    )


def _labels(split: str, rate: float) -> LabelEstimate:
    return LabelEstimate(
        split=split,
        n_images=200,
        flagged=int(rate * 200),
        rate=rate,
        low=rate - 0.05,
        high=rate + 0.05,
        sampled=False,
        flagged_ids=[],
    )


def test_the_shipped_policy_is_valid() -> None:
    policy = load_policy()
    assert policy.rules[-1].input == "always"
    assert {r.action for r in policy.rules} >= {
        "data_request",
        "targeted_synthetic",
        "curation",
        "model_change",
        "label_fix",
        "leave_it",
    }


def test_an_invalid_policy_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "recommend.yaml"
    bad.write_text(
        "version: 1\nmax_recommendations: 3\nrules:\n  - {id: x, input: horoscope, min_value: 0,"
        " action: a, kind: config, effect_share: 0}\n"
    )
    with pytest.raises(PolicyError, match="horoscope"):
        load_policy(bad)


def test_a_confirmed_slice_becomes_targeted_synthetic_data_with_evidence() -> None:
    recs = recommend(Inputs(findings=[_row("contrast<0.1", ["contrast"], 0.6, 0.2)]))
    top = recs[0]
    assert (
        isinstance(top, Recommendation) and top.action == "targeted_synthetic" and top.kind == TicketKind.DATA
    )
    assert top.predicted_effect.slice == "contrast<0.1" and top.predicted_effect.direction == Direction.DOWN
    assert top.predicted_effect.size == pytest.approx(0.2)  # effect_share 0.5 of the 0.4 shortfall
    assert top.evidence["n"] == 120 and top.evidence["interval"] == pytest.approx([0.55, 0.65])
    assert top.change["synthetic"]["slice"] == "contrast<0.1"
    assert all(r.action != "leave_it" for r in recs)


def test_a_strong_background_slice_also_asks_people_for_real_data() -> None:
    recs = recommend(Inputs(findings=[_row("background=texture", ["background"], 0.7, 0.1)]))
    requests = [r for r in recs if r.kind == TicketKind.DATA_REQUEST]
    assert requests and "background=texture" in requests[0].change["request"]


def test_scalar_inputs_map_to_their_actions() -> None:
    recs = recommend(
        Inputs(
            learning_curve={"0.25": 0.40, "0.5": 0.50, "1.0": 0.56},
            train_dev_gap=0.2,
            dev_labels=_labels("dev", 0.4),
            model_dice=0.7,
        )
    )
    actions = [r.action for r in recs]
    assert actions == ["data_request", "training_change", "curation"]
    assert recs[0].predicted_effect.direction == Direction.UP


def test_train_labels_much_worse_than_dev_come_first_as_label_fixes() -> None:
    inputs = Inputs(
        findings=[_row("size<8", ["size"], 0.5, 0.2)],
        dev_labels=_labels("dev", 0.1),
        train_labels=_labels("train", 0.4),
        model_dice=0.7,
    )
    recs = recommend(inputs)
    assert recs[0].action == "label_fix" and recs[1].action == "targeted_synthetic"
    inputs.model_dice = 0.1  # a weak model's label flags say more about the model than the labels
    assert recommend(inputs)[0].action == "targeted_synthetic"


def test_a_spread_drop_is_a_model_change_but_a_concentrated_one_is_the_slice() -> None:
    spread = recommend(Inputs(findings=[_row("size<8", ["size"], 0.5, 0.3)], overall_drop=0.3))
    assert spread[0].action == "model_change"
    concentrated = recommend(Inputs(findings=[_row("size<8", ["size"], 0.5, 0.05)], overall_drop=0.1))
    assert concentrated[0].action == "targeted_synthetic"


def test_nothing_above_threshold_means_leave_it_alone() -> None:
    recs = recommend(Inputs(train_dev_gap=0.01, learning_curve={"0.5": 0.6, "1.0": 0.605}))
    assert [r.action for r in recs] == ["leave_it"]
    assert recs[0].predicted_effect.direction == Direction.NONE


def test_a_measured_learning_curve_feeds_the_more_data_rule() -> None:
    from analysis.curve import learning_curve
    from analysis.toy import HistogramTrainer, toy_split

    train, dev = toy_split(160, 32, seed=31), toy_split(80, 32, seed=32)
    curve = learning_curve(HistogramTrainer(), train, dev, seed=0)
    assert list(curve) == ["0.25", "0.5", "1.0"] and all(0.0 <= v <= 1.0 for v in curve.values())
    recs = recommend(Inputs(learning_curve=curve))
    rising = curve["1.0"] - curve["0.5"] >= 0.02
    assert (recs[0].action == "data_request") == rising


def test_a_slice_training_lacks_comes_first_for_drawn_data_even_when_weaker() -> None:
    strong = _row("contrast<0.1", ["contrast"], 0.62, 0.2, coverage=1.1)
    absent = _row("size<4", ["size"], 0.6, 0.2, coverage=0.0)
    unmeasured = _row("background=texture", ["background"], 0.61, 0.2)
    recs = [
        r
        for r in recommend(Inputs(findings=[strong, unmeasured, absent]))
        if r.action == "targeted_synthetic"
    ]
    assert [r.predicted_effect.slice for r in recs] == ["size<4", "contrast<0.1", "background=texture"]
    assert recs[0].evidence["train_coverage"] == 0.0 and "training holds 0%" in recs[0].rationale
    assert "train_coverage" not in recs[2].evidence and "training holds" not in recs[1].rationale
    plain = [r for r in recommend(Inputs(findings=[strong, unmeasured])) if r.action == "targeted_synthetic"]
    assert [r.predicted_effect.slice for r in plain] == [
        "contrast<0.1",
        "background=texture",
    ]  # strength alone


def test_only_slices_the_generator_can_draw_become_top_ups() -> None:
    """A cluster-shaped or dose slice is real, but no synthetic top-up can target it: the
    top-up rule passes it by, so it is never refused later as a ticket the loop cannot run."""
    cluster = _row("shape=cluster", ["shape"], 0.66, 0.2)
    dose = _row("dose<900", ["dose"], 0.64, 0.2)
    thin = _row("shape=shrinkage", ["shape"], 0.6, 0.2)
    recs = [r for r in recommend(Inputs(findings=[cluster, dose, thin])) if r.action == "targeted_synthetic"]
    assert [r.predicted_effect.slice for r in recs] == ["shape=shrinkage"]


def test_a_rules_predicted_share_learns_from_what_its_fixes_recovered_in_this_home() -> None:
    """The written effect_share is a prior worth prior_weight measurements: shares measured before
    pull the next prediction's size toward them, and the evidence says how it was reached."""
    row = _row("contrast<0.1", ["contrast"], 0.6, 0.2)  # a 0.4 shortfall
    policy = load_policy()
    assert policy.prior_weight == 3
    prior = recommend(Inputs(findings=[row]))[0]
    assert prior.predicted_effect.size == pytest.approx(0.2)  # 0.5 of 0.4: the prior alone
    assert prior.evidence["prediction"] == {
        "shortfall": 0.4,
        "prior_share": 0.5,
        "prior_weight": 3.0,
        "measured": 0,
        "measured_mean": None,
        "share": 0.5,
    }
    learnt = recommend(Inputs(findings=[row], measured_shares={"targeted-synthetic": [0.0, -0.1, 0.1]}))[0]
    assert learnt.evidence["prediction"]["share"] == pytest.approx(0.25)  # (3 * 0.5 + 0) / 6
    assert learnt.predicted_effect.size == pytest.approx(0.1)
    wrong_way = recommend(Inputs(findings=[row], measured_shares={"targeted-synthetic": [-3.0] * 3}))[0]
    assert wrong_way.predicted_effect.size == 0.0  # clipped at no effect, never a negative size
    other_rule = recommend(Inputs(findings=[row], measured_shares={"robustness": [0.0] * 9}))[0]
    assert other_rule.predicted_effect.size == pytest.approx(0.2)  # only the same rule's history counts
    leave = recommend(
        Inputs(),
    )[0]
    assert leave.action == "leave_it" and leave.predicted_effect.size == 0.0
