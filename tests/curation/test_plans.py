"""Plans, versions, defect curation and the random control, on small real dataset versions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.curation import Action, Plan, PlanItem, apply_plan, curate_defects
from analysis.curation.images import curate_images
from controls.curate_compare import compare_plan, control_plan
from controls.executor import ExecutedTicket, RunnerExecutor
from segfactory.errors import DataError
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic import generate
from synthetic.splits import Split, read_split, write_split
from synthetic.versions import DatasetVersion, create_version, resolve


@pytest.fixture
def version(tmp_home: Path, tmp_path: Path) -> DatasetVersion:
    tmp_home.mkdir(parents=True)
    generate(40, 64, 1, engine="numpy").write(tmp_path / "src" / "train")
    generate(16, 64, 2, engine="numpy").write(tmp_path / "src" / "dev")
    return create_version(
        tmp_home, "syn", {s: tmp_path / "src" / s for s in ("train", "dev")}, approve_it=True
    )


def _plan(version: DatasetVersion, *items: PlanItem) -> Plan:
    return Plan(kind="images", dataset=version.ref, content_hash=version.content_hash, items=list(items))


def _remove(k: int) -> PlanItem:
    return PlanItem(split="train", image_id=k, action=Action.REMOVE, reason="test")


def test_apply_keeps_the_parent_and_records_its_hash(tmp_home: Path, version: DatasetVersion) -> None:
    plan = _plan(
        version,
        _remove(3),
        PlanItem(split="train", image_id=4, action=Action.OVERSAMPLE, reason="rare", times=2),
    )
    new, approved = apply_plan(tmp_home, plan)
    assert approved and new.ref == "syn/v2" and new.parent == version.content_hash
    train = read_split(new.train)
    assert len(train) == 40 - 1 + 2
    assert [m["source_id"] for m in train.image_meta].count(4) == 3
    assert resolve(tmp_home, "syn/v1").content_hash == version.content_hash  # the old one is untouched
    assert read_split(new.dev).content_hash == read_split(version.dev).content_hash


def test_label_change_waits_for_a_person(tmp_home: Path, version: DatasetVersion, tmp_path: Path) -> None:
    np.save(tmp_path / "m.npy", np.zeros((64, 64), np.uint8))
    plan = _plan(
        version,
        PlanItem(
            split="train",
            image_id=0,
            action=Action.REDRAW,
            reason="bad mask",
            mask_file=str(tmp_path / "m.npy"),
        ),
    )
    new, approved = apply_plan(tmp_home, plan)
    assert not approved and not resolve(tmp_home, new.ref).approved
    pending = json.loads((tmp_home / "datasets/approvals/pending/syn-v2.json").read_text())
    assert pending["ref"] == "syn/v2" and pending["items"][0]["image_id"] == 0
    assert not read_split(new.train).masks[0].any()


def test_bad_plans_are_refused_and_nothing_is_written(tmp_home: Path, version: DatasetVersion) -> None:
    with pytest.raises(DataError, match="do not exist"):
        apply_plan(tmp_home, _plan(version, _remove(40)))
    with pytest.raises(DataError, match="was made for"):
        apply_plan(
            tmp_home, Plan(kind="images", dataset=version.ref, content_hash="f" * 64, items=[_remove(1)])
        )
    with pytest.raises(DataError, match="no items"):
        apply_plan(tmp_home, _plan(version))
    assert not (tmp_home / "datasets/syn/v2").exists()
    assert [p.name for p in (tmp_home / "datasets").iterdir() if p.name.startswith(".")] == []


def test_empty_dataset_is_refused(version: DatasetVersion) -> None:
    dev = read_split(version.dev, mmap=True)
    empty = Split(None, np.zeros((0, 64, 64), np.float32), np.zeros((0, 64, 64), np.uint8), [], [], {})
    with pytest.raises(DataError, match="empty"):
        curate_images(empty, dev, dataset="syn/v1", content_hash="x")
    with pytest.raises(DataError, match="empty"):
        curate_defects(empty, dev, dataset="syn/v1", content_hash="x")


def test_defects_repeated_across_the_split_and_bad_masks(tmp_home: Path, tmp_path: Path) -> None:
    tmp_home.mkdir(parents=True)
    train = generate(30, 64, 5, engine="numpy")
    dev = generate(10, 64, 6, engine="numpy")
    k = next(i for i in range(len(dev.images)) if dev.masks[i].any())
    train.images[7], train.masks[7] = dev.images[k], dev.masks[k]  # one physical defect in both splits
    train.defects = [d for d in train.defects if d["image_id"] != 7] + [
        {**d, "image_id": 7} for d in dev.defects if d["image_id"] == k
    ]
    train.image_meta[7] = {**dev.image_meta[k], "id": 7}
    j = next(i for i in range(len(train.images)) if train.masks[i].any() and i != 7)
    train.masks[j] = np.roll(train.masks[j], (9, 9), axis=(0, 1))  # a mask off its void
    t_split = Split(None, train.images, train.masks, train.image_meta, train.defects, {})
    d_split = Split(None, dev.images, dev.masks, dev.image_meta, dev.defects, {})
    report, plan = curate_defects(t_split, d_split, dataset="x/v1", content_hash="h")
    assert [7, k] in report.duplicate_defects_cross_split
    assert j in [b.image_id for b in report.bad_masks]
    assert 7 in {it.image_id for it in plan.items} and j not in {it.image_id for it in plan.items}
    weights = np.array(report.sampling_weights)
    assert weights.shape == (30,) and abs(weights.mean() - 1) < 1e-3


def _disc_version(home: Home, tmp_path: Path) -> DatasetVersion:
    from tests.vision._data import draw

    for name, n, seed in (("train", 24, 0), ("dev", 12, 1)):
        images, masks, meta, defects = draw(n, 32, seed)
        write_split(tmp_path / "src" / name, images, masks, meta, defects, {"generator": "tests.discs"})
    return create_version(
        home.root, "discs", {s: tmp_path / "src" / s for s in ("train", "dev")}, approve_it=True
    )


class _Recording:
    """Records what the comparison asks to run (the ticket plumbing, without training)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Ticket, DatasetVersion]] = []

    def __call__(self, ticket: Ticket, version: DatasetVersion) -> ExecutedTicket:
        self.calls.append((ticket, version))
        return ExecutedTicket(status="DONE", dev_metrics={"dice": 0.5})


def test_control_removes_as_many_random_items_with_same_budget_and_seed(
    tmp_home: Path, version: DatasetVersion
) -> None:
    plan = _plan(version, _remove(1), _remove(2), _remove(5))
    control = control_plan(tmp_home, plan, seed=4)
    assert len(control.items) == 3 and control.kind == "control"
    assert control == control_plan(tmp_home, plan, seed=4)
    executor = _Recording()
    result = compare_plan(tmp_home, plan, budget_s=60, seed=4, executor=executor)
    (t1, v1), (t2, v2) = executor.calls
    assert t1.kind == t2.kind == "curation" and t1.arm == t2.arm == "curation"
    assert t1.budget == t2.budget and t1.seed == t2.seed == 4
    assert len(read_split(v1.train)) == len(read_split(v2.train)) == 37
    assert result.dev_better == "tie"
    arm = {"dataset", "ticket", "status", "reason", "dev_metrics", "verdict", "model"}
    shape = {"curated", "control", "budget_s", "seed", "epochs", "removed", "dev_better", "note"}
    dumped = result.model_dump(mode="json")  # `curate compare --json`, a contract
    assert set(dumped) == shape and set(dumped["curated"]) == set(dumped["control"]) == arm
    again = compare_plan(tmp_home, plan, budget_s=60, seed=4, executor=_Recording())  # reuses both versions
    assert again.curated.dataset == result.curated.dataset


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_compare_runs_both_arms_through_the_runner_in_bwrap(tmp_home: Path, tmp_path: Path) -> None:
    from audit import AuditLog, MemoryAnchorStore
    from runner.scheduler import Admission, MemoryEstimator, Scheduler, SchedulerSettings
    from tests.runner.conftest import PROFILED

    tmp_home.mkdir(parents=True)
    home = Home(tmp_home)
    version = _disc_version(home, tmp_path)
    plan = Plan(
        kind="images",
        dataset=version.ref,
        content_hash=version.content_hash,
        items=[_remove(k) for k in (0, 1, 2, 3)],
    )
    settings = SchedulerSettings(reserve_bytes=0)
    scheduler = Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )
    with AuditLog(home, MemoryAnchorStore()) as audit:
        executor = RunnerExecutor(
            home,
            backend="bwrap",
            run_id="curation",
            audit=audit,
            scheduler=scheduler,
            base_config={"model": {"name": "unet-mobilenetv3"}, "epochs": 1, "batch_size": 8, "threads": 1},
        )
        result = compare_plan(home.root, plan, budget_s=240, seed=3, executor=executor)
    for arm in (result.curated, result.control):
        assert arm.status == "DONE", arm
        assert arm.dev_metrics is not None and "dice" in arm.dev_metrics
    assert result.dev_better in ("curated", "control", "tie")


def _sigmoid_model(path: Path, scale: float) -> Path:
    """A real ONNX graph: prob = sigmoid(scale * (image - 0.5))."""
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
    y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, "H", "W"])
    nodes = [
        helper.make_node("Sub", ["image", "half"], ["c"]),
        helper.make_node("Mul", ["c", "k"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["prob"]),
    ]
    inits = [
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
        helper.make_tensor("k", TensorProto.FLOAT, [], [scale]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    save(model, str(path))
    return path


@pytest.mark.slow
def test_hard_images_and_label_review_with_a_model(version: DatasetVersion, tmp_path: Path) -> None:
    model = _sigmoid_model(tmp_path / "m.onnx", 8.0)
    train, dev = read_split(version.train, mmap=True), read_split(version.dev, mmap=True)
    report, _ = curate_images(train, dev, dataset=version.ref, content_hash=version.content_hash, model=model)
    losses = [row.loss for row in report.hard_images or []]
    assert len(losses) == min(50, len(train)) and losses == sorted(losses, reverse=True)
    queue = tmp_path / "review.jsonl"
    rep, _ = curate_defects(
        train, dev, dataset=version.ref, content_hash=version.content_hash, model=model, review_queue=queue
    )
    rows = [json.loads(line) for line in queue.read_text().splitlines()]
    assert rep.label_review.n == len(rows) and rows[0]["source"] == "cleanlab"
    assert len({r["image_id"] for r in rows if r["source"] == "cleanlab"}) == min(100, len(train))
