"""Top-up pieces that need no training: doses, budget, arm data sets, dose-response reading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controls.topup import TopupPlan, make_ticket, parse_doses, summarise, turning_point
from controls.topup_report import ArmAtDose, DoseRow
from segfactory.errors import LimitExceeded, UsageError
from segfactory.records import Arm, TicketKind
from segfactory.stats import Interval
from synthetic import generate
from synthetic.extend import build_arm
from synthetic.params import GenParams
from synthetic.slices import LOW_CONTRAST_MAX
from synthetic.splits import read_split
from synthetic.versions import create_version, resolve


def _plan(**kw: object) -> TopupPlan:
    values: dict[str, object] = {
        "slice_name": "low-contrast",
        "doses": [0, 100],
        "ticket_seconds": 60.0,
        "epochs": 1,
        "seed": 3,
        "budget_s": None,
    }
    values.update(kw)
    return TopupPlan(**values)  # type: ignore[arg-type]


def test_doses_always_include_the_nothing_arm() -> None:
    assert parse_doses("250,0,500") == [0, 250, 500] and parse_doses("100") == [0, 100]
    with pytest.raises(UsageError, match="comma-separated integers"):
        parse_doses("1e2")


def test_a_top_up_exceeding_the_budget_is_refused_before_anything_runs() -> None:
    plan = _plan(doses=[0, 250, 500], budget_s=240.0)  # 5 tickets x 60 s = 300 s
    with pytest.raises(LimitExceeded, match="5 tickets x 60 s = 300 device-seconds but --budget is 240 s"):
        plan.check(GenParams())
    assert _plan(doses=[0, 250, 500], budget_s=300.0).check(GenParams()).contrast_max == LOW_CONTRAST_MAX
    with pytest.raises(UsageError, match="doses must lie"):
        _plan(doses=[0, -5]).check(GenParams())


def test_arm_versions_add_n_images_and_keep_dev(tmp_path: Path) -> None:
    for name, seed in (("train", 1), ("dev", 2)):
        generate(20, 32, seed, workers=1).write(tmp_path / "src" / name)
    base = create_version(
        tmp_path, "synthetic", {s: tmp_path / "src" / s for s in ("train", "dev")}, approve_it=True
    )
    plan = _plan()
    params = plan.check(GenParams())
    syn = build_arm(tmp_path, base, "synthetic", 12, params, plan.slice_name, plan.seed, tmp_path / "work")
    aug = build_arm(tmp_path, base, "augment", 12, params, plan.slice_name, plan.seed, tmp_path / "work")
    base_train = read_split(base.train)
    for version in (syn, aug):
        assert resolve(tmp_path, version.ref).approved
        assert (
            len(read_split(version.train)) == 32 and version.split_hashes["dev"] == base.split_hashes["dev"]
        )
    added = read_split(syn.train).defects[len(base_train.defects) :]
    assert added and all(d["contrast"] <= LOW_CONTRAST_MAX + 1e-9 for d in added)
    aug_split = read_split(aug.train)
    for row, image, mask in zip(
        aug_split.image_meta[20:], aug_split.images[20:], aug_split.masks[20:], strict=True
    ):
        src_mask = base_train.masks[row["augmented_from"]]  # same void pixels, flipped or turned
        assert mask.sum() == src_mask.sum() and image.shape == (32, 32)
    ticket = make_ticket("t-syn", "synthetic", 12, syn, plan)
    assert ticket.arm == Arm.TOPUP and ticket.kind == TicketKind.DATA and ticket.seed == 3


def _counts(hits: list[int], n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(len(hits))
    detected = np.zeros(n)
    detected[: sum(hits)] = 1
    return rng.permutation(detected), np.ones(n)


def test_dose_response_names_where_more_stops_helping_and_where_it_hurts() -> None:
    nothing = _counts([30])
    better = (np.clip(nothing[0] + (np.arange(60) < 25), 0, 1), nothing[1])  # helps a lot
    worse = (np.where(np.arange(60) < 40, 0.0, nothing[0]), nothing[1])  # loses most hits
    curve = {
        "nothing": {0: nothing},
        "synthetic": {100: better, 200: worse},
        "augment": {100: nothing, 200: nothing},
    }
    result = summarise(curve, [0, 100, 200], seed=0)
    point = result.turning_point
    assert point.best_n == 100 and point.helping == [100] and point.hurting == [200]
    assert point.stops_helping_after == 100 and "starts hurting at n=200" in point.summary
    rows = result.as_json()["rows"]
    assert (
        "synthetic_vs_augment" not in rows[0] and "synthetic_vs_augment" in rows[1]
    )  # only where both trained
    assert set(rows[0]) == {"n", "synthetic", "augment"}  # the JSON keeps the shape of the plain dicts

    def row(n: int, estimate: float, low: float, high: float) -> DoseRow:
        at = Interval(estimate=estimate, low=low, high=high, alpha=0.05)
        return DoseRow(n=n, synthetic=ArmAtDose(recall=at, vs_nothing=at), augment=None)

    flat = turning_point([row(0, 0.0, 0.0, 0.0), row(50, 0.01, -0.05, 0.07)])
    assert flat.helping == [] and "no dose measurably changed" in flat.summary


def test_rounds_are_recorded_for_people_including_null_results(tmp_path: Path) -> None:
    from controls.rounds import RoundRecord, record_round

    for result in ("no dose measurably changed real-slice recall", "helps at n=[250]"):
        record_round(
            tmp_path,
            RoundRecord(weakness="thin voids", fix_kind="targeted_synthetic", fix="n=250", result=result),
        )
    rows = (tmp_path / "rounds.jsonl").read_text().splitlines()
    assert len(rows) == 2 and "no dose measurably changed" in rows[0]


def test_a_training_cap_is_lifted_for_the_arms_or_refused_when_it_cuts_the_base(tmp_path: Path) -> None:
    from controls.topup import topup_config
    from tests.conftest import REPO

    generate(12, 16, 1, workers=1).write(tmp_path / "train")
    assert "max_train_images" not in topup_config({"epochs": 1, "max_train_images": 12}, tmp_path / "train")
    assert topup_config(REPO / "configs" / "run-demo.yaml", tmp_path / "train")["sampling"]["crop"] == 48
    with pytest.raises(UsageError, match="top-up images would be cut"):
        topup_config({"max_train_images": 8}, tmp_path / "train")
    assert _plan(round_two=True).n_tickets == _plan().n_tickets + 1  # round two's ticket is budgeted
