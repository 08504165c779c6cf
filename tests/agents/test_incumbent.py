"""Every ticket kind changes what it says it changes, on top of the incumbent, or is refused.

``HostServices.plan`` computes, on the host, what a ticket would train (config after patching,
dataset version, code overlay) and its fingerprint; ``check`` refuses a ticket whose fingerprint
equals its parent's. These tests use a real home with real dataset versions (the generator's
own output) and the real action catalogue; no sandbox is started.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import JsonValue

from agents.actions import NotExecutable, load_catalogue, realise_config
from agents.incumbent import DEFAULT_ACTION_EVIDENCE, fingerprint
from agents.run_setup import RunSetup
from agents.services import HostServices
from agents.validate import BASE_CONFIG_EVIDENCE
from gate.replies import GateStatus
from runner import Evidence, TicketOutcome, TicketStatus
from segfactory.errors import UsageError
from segfactory.files import append_jsonl
from segfactory.home import Home
from segfactory.layout import BASELINE_MODEL, PROMOTIONS, PlanRow, RunsLayout
from segfactory.records import (
    Arm,
    Budget,
    Direction,
    ExpectedEffect,
    InitFrom,
    Recommendation,
    Ticket,
    TicketKind,
    sha256_file,
)
from synthetic import generate
from synthetic.splits import read_split, write_split
from synthetic.versions import create_version, resolve
from tests.agents.conftest import Log, gate_status

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Gate:
    best: str
    promoted: list[str] = field(default_factory=list)

    def status(self) -> GateStatus:
        return gate_status(self.best)


def _ticket(
    tid: str,
    kind: TicketKind = TicketKind.CONFIG,
    change: dict[str, JsonValue] | None = None,
    *,
    evidence: list[str] | None = None,
    arm: Arm = Arm.AGENT,
    replicate_of: str | None = None,
) -> Ticket:
    return Ticket(
        id=tid,
        arm=arm,
        kind=kind,
        hypothesis="h",
        change=change or {},
        replicate_of=replicate_of,
        budget=Budget(device_seconds=60, epochs=4),
        evidence=evidence or ["recommendation:r-0"],
        seed=7,
        expected_effect=ExpectedEffect(metric="dice", direction=Direction.UP, size=0.01),
    )


@pytest.fixture
def services(audit_log: Log, tmp_path: Path) -> HostServices:
    home = Home(audit_log.home.root)
    baseline = home.root / BASELINE_MODEL
    baseline.parent.mkdir(parents=True)
    baseline.write_bytes(b"classical baseline")
    generate(24, 32, 1).write(tmp_path / "train")
    generate(12, 32, 2).write(tmp_path / "dev")
    version = create_version(
        home.root, "synthetic", {"train": tmp_path / "train", "dev": tmp_path / "dev"}, approve_it=True
    )
    setup = RunSetup(
        home=home,
        run_id="k1",
        backend="bwrap",
        dataset=version,
        base_config=REPO / "configs" / "run-demo.yaml",
        gate=Gate(sha256_file(baseline)),
        audit=audit_log,
        dev_margin=0.005,
        max_epochs=10,
    )
    return HostServices(setup)


def _rec(rule: str, **evidence: Any) -> Recommendation:
    return Recommendation(
        id=f"{rule}-0",
        evidence=evidence,
        action=rule,
        kind=TicketKind.CONFIG,
        change={"action": rule},
        predicted_effect=ExpectedEffect(metric="dice", direction=Direction.UP, size=0.02),
    )


@pytest.mark.parametrize(
    "rule,evidence",
    [
        ("model-underfit", {}),
        ("model-capacity", {}),
        ("regularise", {}),
        ("robustness", {"perturbation": "lower_dose"}),
    ],
)
def test_each_config_action_trains_a_config_other_than_the_incumbents(
    services: HostServices, rule: str, evidence: dict[str, JsonValue]
) -> None:
    incumbent = services.incumbent()
    got = realise_config(
        rule, load_catalogue().actions[rule], _rec(rule, **evidence), incumbent.config, set(), max_epochs=10
    )
    assert not isinstance(got, NotExecutable), got
    ticket = _ticket("k1-t001", change=got.change)
    if got.epochs:
        ticket = ticket.model_copy(update={"budget": Budget(device_seconds=60, epochs=got.epochs)})
    plan = services.lineage.plan(ticket)
    assert plan.fingerprint != plan.parent_fingerprint
    host = {"seed", "validation"}  # host-owned: the ticket's seed, the carve every ticket keeps its epoch by
    base = {k: v for k, v in incumbent.config.items() if k not in host}
    trained = {k: v for k, v in plan.config.items() if k not in host}
    changed = {k for k in set(base) | set(trained) if base.get(k) != trained.get(k)}
    assert changed and changed <= {key.split(".")[0] for key in got.change}
    assert services.check(ticket) == []


def test_robustness_widens_the_augmentation_that_covers_the_failing_perturbation(
    services: HostServices,
) -> None:
    entry = load_catalogue().actions["robustness"]
    got = realise_config(
        "robustness",
        entry,
        _rec("robustness", perturbation="detector_blur"),
        services.incumbent().config,
        set(),
        max_epochs=10,
    )
    assert not isinstance(got, NotExecutable)
    # the demo base blurs 0.5-1.0 (nnU-Net's range): both ends twice as far from no blur
    assert got.change["augment.blur_sigma"] == {"low": 1.0, "high": 2.0}
    none = realise_config(
        "robustness",
        entry,
        _rec("robustness", perturbation="banding"),
        services.incumbent().config,
        set(),
        max_epochs=10,
    )
    assert isinstance(none, NotExecutable) and "no training augmentation covers" in none.reason


def test_an_option_already_tried_on_the_incumbent_gives_way_to_the_next(services: HostServices) -> None:
    entry = load_catalogue().actions["model-capacity"]
    config = services.incumbent().config
    first = realise_config("model-capacity", entry, _rec("model-capacity"), config, set(), max_epochs=10)
    assert not isinstance(first, NotExecutable) and first.change == {"model.decoder_width": 32}
    second = realise_config(
        "model-capacity",
        entry,
        _rec("model-capacity"),
        config,
        {json.dumps(first.change, separators=(",", ":"), sort_keys=True)},
        max_epochs=10,
    )
    assert not isinstance(second, NotExecutable) and second.change == {"model.name": "unet-resnet10t"}


def test_a_change_that_keeps_the_incumbents_inputs_is_refused_and_the_repeat_kinds_are_not(
    services: HostServices,
) -> None:
    _promote_with(services, config_patch={"optim.lr": 0.004})
    same = _ticket("k1-t001", change={"optim.lr": 0.004})  # what the incumbent already trained with
    assert "trains exactly what its parent" in services.check(same)[0]
    clamped = _ticket("k1-t002", change={"epochs": 8})  # a budget of 4 epochs would train 4: the same again
    assert "trains exactly what its parent" in services.check(clamped)[0]
    for repeat in (
        _ticket("k1-t003", evidence=[BASE_CONFIG_EVIDENCE]),
        _ticket("k1-t004", evidence=[DEFAULT_ACTION_EVIDENCE]),
        _ticket("k1-t005", arm=Arm.AA, evidence=[]),
        _ticket("k1-t006", arm=Arm.CHALLENGE, evidence=[]),
        _ticket("k1-t001-rep", change={"epochs": 4}, replicate_of="k1-t001"),
    ):
        assert services.check(repeat) == [], repeat.id


def test_a_run_refuses_the_repeat_at_the_ticket_boundary_too(services: HostServices, audit_log: Log) -> None:
    _promote_with(services, config_patch={"optim.lr": 0.004})
    services.route.execute = lambda *a: pytest.fail("a repeat must not train")  # type: ignore[method-assign]
    outcome = services.run_ticket(_ticket("k1-t001", change={"optim.lr": 0.004}))
    assert outcome.status == "failed" and "trains exactly what its parent" in outcome.reason
    assert audit_log.events("ticket_refused_repeat")[0]["ticket_id"] == "k1-t001"


def test_a_targeted_synthetic_ticket_trains_on_a_topped_up_version(services: HostServices) -> None:
    ticket = _ticket("k1-t001", TicketKind.DATA, {"synthetic": {"slice": "contrast<0.2", "n": 6}})
    plan = services.lineage.plan(ticket)
    parent = services.incumbent()
    assert plan.dataset != parent.dataset and plan.dataset_hash != parent.dataset_hash
    assert len(read_split(resolve(services.setup.home.root, plan.dataset).train)) == 24 + 6
    assert plan.fingerprint != plan.parent_fingerprint


def _capped(services: HostServices, tmp_path: Path, cap: int, run_id: str) -> HostServices:
    """The same home and run set-up, on a base config that trains the first ``cap`` train images."""
    import yaml

    config = yaml.safe_load((REPO / "configs" / "run-demo.yaml").read_text()) | {"max_train_images": cap}
    path = tmp_path / f"capped-{cap}.yaml"
    path.write_text(yaml.safe_dump(config))
    return HostServices(
        services.setup.__class__(**{**services.setup.__dict__, "base_config": path, "run_id": run_id})
    )


def test_a_top_up_on_a_capped_parent_trains_the_parents_images_and_every_added_one(
    services: HostServices, tmp_path: Path
) -> None:
    """Training keeps the first max_train_images images and a top-up's come last: without care the
    cap cuts exactly them, and the ticket trains its parent's images under another name."""
    capped = _capped(services, tmp_path, 16, "k2")  # the parent trains on the first 16 of 24
    plan = capped.lineage.plan(
        _ticket("k2-t001", TicketKind.DATA, {"synthetic": {"slice": "contrast<0.2", "n": 6}})
    )
    base = read_split(resolve(services.setup.home.root, capped.incumbent().dataset).train)
    train = read_split(resolve(services.setup.home.root, plan.dataset).train)
    assert len(train) == 16 + 6 and train.manifest["appended"] == 6
    assert np.array_equal(train.images[:16], base.images[:16])  # the parent's own images, then the new
    assert not any(np.array_equal(train.images[-1], image) for image in base.images)
    assert plan.config["max_train_images"] is None  # all 22 are trained on
    assert plan.fingerprint != plan.parent_fingerprint


def test_a_curation_ticket_trains_on_the_applied_plan_or_is_not_executable(
    services: HostServices, tmp_path: Path
) -> None:
    rec = _rec("curation")
    realised = services.realise(_analysis(rec))
    assert realised.recommendations == ()  # the generator's own images hold no duplicate: an empty plan
    rows = [
        json.loads(x)
        for x in (services.setup.layout.people / "not_executable.jsonl").read_text().splitlines()
    ]
    assert "the curation plan for synthetic/v1 is empty" in rows[0]["reason"]
    # a train split with exact copies makes a plan; the ticket trains on the version it produces
    base = resolve(services.setup.home.root, "synthetic/v1")
    train = read_split(base.train)
    dup = write_split(
        tmp_path / "dup",
        np.concatenate([train.images, train.images[:3]]),
        np.concatenate([train.masks, train.masks[:3]]),
        [*train.image_meta, *({**m, "id": 24 + k} for k, m in enumerate(train.image_meta[:3]))],
        [
            *train.defects,
            *({**d, "image_id": 24 + int(d["image_id"])} for d in train.defects if int(d["image_id"]) < 3),
        ],
        {"generator": "test copies"},
    )
    dupped = create_version(
        services.setup.home.root, "synthetic", {"train": dup, "dev": None}, parent=base.ref, approve_it=True
    )
    _promote_with(services, dataset=dupped.ref)
    curated = services.realise(_analysis(rec)).recommendations
    assert len(curated) == 1 and curated[0].kind is TicketKind.CURATION
    plan = services.lineage.plan(_ticket("k1-t009", TicketKind.CURATION, dict(curated[0].change)))
    assert plan.dataset == curated[0].change["dataset"] != dupped.ref
    assert len(read_split(resolve(services.setup.home.root, plan.dataset).train)) < 27


def test_a_label_fix_waits_for_the_reviewed_version_then_trains_on_it(
    services: HostServices, tmp_path: Path
) -> None:
    rec = _rec("label-fix")
    assert services.realise(_analysis(rec)).recommendations == ()
    assert (
        "waits for a reviewed version" in (services.setup.layout.people / "not_executable.jsonl").read_text()
    )
    base = resolve(services.setup.home.root, "synthetic/v1")
    train = read_split(base.train)
    masks = train.masks.copy()
    masks[0] = 0  # a person removed a wrong label
    reviewed = write_split(
        tmp_path / "rev", train.images, masks, train.image_meta, train.defects[1:], {"generator": "reviewed"}
    )
    version = create_version(
        services.setup.home.root,
        "synthetic",
        {"train": reviewed, "dev": None},
        parent=base.ref,
        approve_it=True,
    )
    got = services.realise(_analysis(rec)).recommendations
    assert len(got) == 1 and got[0].change["dataset"] == version.ref
    plan = services.lineage.plan(_ticket("k1-t002", TicketKind.CURATION, dict(got[0].change)))
    assert plan.dataset == version.ref and plan.fingerprint != plan.parent_fingerprint


def test_leave_it_and_an_approved_request_without_data_become_no_silent_ticket(
    services: HostServices, audit_log: Log
) -> None:
    leave = Recommendation(
        id="leave-it-0",
        evidence={},
        action="leave_it",
        kind=TicketKind.CONFIG,
        change={"action": "leave_it"},
        predicted_effect=ExpectedEffect(metric="dice", direction=Direction.NONE, size=0),
    )
    assert services.realise(_analysis(leave)).recommendations == ()
    [approved] = _granted(services, audit_log, "k1-q1", "k1")  # approved as the console does: no data
    with pytest.raises(UsageError, match="names no dataset version"):
        services.lineage.plan(approved)


def test_a_code_ticket_fingerprints_its_code(services: HostServices) -> None:
    code = _ticket("k1-t001", TicketKind.CODE, {"files": {"code/vision/losses.py": "# changed\n"}})
    plan = services.lineage.plan(code)
    assert plan.code == {"vision/losses.py": "# changed\n"}
    assert plan.fingerprint != plan.parent_fingerprint


def test_after_a_promotion_tickets_patch_the_promoted_config_and_data(services: HostServices) -> None:
    _promote_with(services, config_patch={"optim.lr": 0.002})
    incumbent = services.incumbent()
    assert incumbent.trained and incumbent.config["optim"]["lr"] == 0.002
    plan = services.lineage.plan(
        _ticket("k1-t005", change={"epochs": 6}, evidence=["recommendation:x-0"]).model_copy(
            update={"budget": Budget(device_seconds=60, epochs=6)}
        )
    )
    assert plan.config["optim"]["lr"] == 0.002 and plan.config["epochs"] == 6  # built on what won
    assert plan.parent_sha256 == incumbent.sha256


def _analysis(*recs: Recommendation) -> Any:
    from agents.context import DevAnalysis

    return DevAnalysis(summary="dev", recommendations=recs)


def _promote_with(
    services: HostServices, *, dataset: str = "synthetic/v1", config_patch: dict[str, JsonValue] | None = None
) -> None:
    """Record a promoted ticket as HostServices.promote does, and make it the gate's best."""
    ticket = _ticket("k1-p1", change=config_patch or {"optim.lr": 0.004})
    row = services.lineage.plan(ticket)
    row = row.model_copy(
        update={"dataset": dataset, "dataset_hash": resolve(services.setup.home.root, dataset).content_hash}
    )
    model = services.setup.home.tickets_dir("k1") / "k1-p1" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"promoted model " + dataset.encode())
    append_jsonl(
        services.setup.home.runs / PROMOTIONS,
        {
            "model": str(model),
            "sha256": sha256_file(model),
            "run_id": "k1",
            "ticket_id": "k1-p1",
            "config": row.config,
            "dataset": row.dataset,
            "dataset_hash": row.dataset_hash,
            "code": {},
            "fingerprint": row.fingerprint,
            "parent_sha256": row.parent_sha256,
        },
    )
    services.setup.gate = Gate(sha256_file(model))


def test_robustness_falls_back_to_the_worst_perturbation_an_augmentation_covers(
    services: HostServices,
) -> None:
    entry = load_catalogue().actions["robustness"]
    rec = _rec(
        "robustness",
        perturbation="dead_hot_pixels",
        drops={"dead_hot_pixels": 0.26, "lower_dose": 0.15, "detector_blur": 0.13, "banding": 0.10},
    )
    got = realise_config("robustness", entry, rec, services.incumbent().config, set(), max_epochs=10)
    assert not isinstance(got, NotExecutable)
    assert got.change["augment.noise_std"] == {"low": 0.0, "high": 0.04}  # lower_dose at severity 3


def _granted(services: HostServices, log: Log, request_id: str, run_id: str, **grant: Any) -> list[Ticket]:
    """A data request approved by a person (``grant``: data, count, scope) in the home's approvals
    record, as ``segfactory approvals approve`` writes it, and taken up by ``run_id``."""
    from agents.approvals import ApprovalQueue

    queue = ApprovalQueue(services.setup.home.state_db, log)
    queue.request(
        _ticket(request_id, TicketKind.DATA_REQUEST, {"request": "real images of thin voids"}), "r0"
    )
    queue.decide(request_id, approve=True, by="alice", **grant)
    taken = [t for t in queue.approved(run_id) if t.id == f"{request_id}-data"]
    assert taken and queue.take(request_id, run_id)
    return taken


def _extra_version(services: HostServices, tmp_path: Path) -> Any:
    generate(10, 32, 9).write(tmp_path / "extra" / "train")
    generate(4, 32, 10).write(tmp_path / "extra" / "dev")
    return create_version(
        services.setup.home.root,
        "real",
        {s: tmp_path / "extra" / s for s in ("train", "dev")},
        approve_it=True,
    )


def test_an_approved_request_trains_on_the_approved_images_within_count_and_scope_even_in_a_later_run(
    services: HostServices, audit_log: Log, tmp_path: Path
) -> None:
    from agents.approvals import ApprovalQueue

    extra = _extra_version(services, tmp_path)
    queue = ApprovalQueue(services.setup.home.state_db, audit_log)
    request = _ticket("r0-t003", TicketKind.DATA_REQUEST, {"request": "real images of thin voids"})
    queue.request(request, "r0")  # an overnight run asked; it ended before anyone answered
    queue.decide(request.id, approve=True, by="alice", data=extra.ref, count=3)
    taken = queue.approved("k1")  # the next run on the home takes it up
    assert [t.id for t in taken] == ["r0-t003-data"] and queue.take(request.id, "k1")
    assert not queue.take(request.id, "k2") and queue.approved("k2") == []  # and no other run
    assert taken[0].change == {"request": "real images of thin voids", "approved_request": "r0-t003"}
    plan = services.lineage.plan(taken[0])
    assert (
        len(read_split(resolve(services.setup.home.root, plan.dataset).train)) == 24 + 3
    )  # the approved count
    assert plan.fingerprint != plan.parent_fingerprint
    shapes = sorted({str(d["shape"]) for d in read_split(extra.train).defects})
    in_scope = {int(d["image_id"]) for d in read_split(extra.train).defects if str(d["shape"]) == shapes[0]}
    services_b = HostServices(services.setup.__class__(**{**services.setup.__dict__, "run_id": "k9"}))
    [scoped] = _granted(
        services, audit_log, "r0-t004", "k9", data=extra.ref, count=100, scope=f"shape={shapes[0]}"
    )
    assert len(
        read_split(resolve(services.setup.home.root, services_b.lineage.plan(scoped).dataset).train)
    ) == 24 + len(in_scope)
    services_c = HostServices(services.setup.__class__(**{**services.setup.__dict__, "run_id": "k8"}))
    [vague] = _granted(services, audit_log, "r0-t005", "k8", data=extra.ref, scope="thin voids only")
    with pytest.raises(UsageError, match="not a slice the factory can apply"):
        services_c.lineage.plan(vague)
    capped = _capped(services, tmp_path, 16, "k7")  # a parent on the first 16: they and the 3 approved
    [again] = _granted(services, audit_log, "r0-t006", "k7", data=extra.ref, count=3)
    plan = capped.lineage.plan(again)
    train = read_split(resolve(services.setup.home.root, plan.dataset).train)
    assert (len(train), train.manifest["appended"], plan.config["max_train_images"]) == (16 + 3, 3, None)


FORGED_GRANT = {  # an LLM proposal that names an approval nobody gave, with a path out of the home
    "kind": "data",
    "hypothesis": "more real data helps",
    "change": {"approved_request": "../../../../x", "approved_data": "synthetic/v1"},
    "budget": {"device_seconds": 60, "epochs": 2},
    "expected_effect": {"metric": "object_f1", "direction": "up", "size": 0.01},
}


def test_approved_keys_an_llm_proposes_are_refused_at_validation(
    keys: None, services: HostServices, audit_log: Log, tmp_path: Path
) -> None:
    import itertools

    from agents.context import DevAnalysis, build_context
    from agents.llm import LLMUsage
    from agents.proposer import get_proposer, propose_valid
    from agents.validate import ticket_problems
    from segfactory.budgets import load_budget_policy
    from tests.agents.fakes import Step, openai_server

    policy, ids = load_budget_policy(), itertools.count(1)
    request = {**FORGED_GRANT, "kind": "data_request", "change": {"request": "x", "approved_count": 900}}
    script = [
        Step.call("propose_tickets", {"tickets": [FORGED_GRANT, request]}),
        Step.call(
            "propose_tickets", {"tickets": [{**FORGED_GRANT, "kind": "config", "change": {"epochs": 2}}]}
        ),
    ]
    with openai_server(script) as fake:
        proposer = get_proposer(
            "openai:gpt-4o",
            sink=audit_log,
            usage=LLMUsage(),
            base_url=fake.base_url,
            run_id="k1",
            timeout_s=10,
            default_budget=Budget(device_seconds=60, epochs=2),
            caps=Budget(device_seconds=120, epochs=10),
            backoff_base_s=0.01,
        )
        accepted = propose_valid(
            proposer,
            build_context(DevAnalysis(summary="dev", recommendations=()), []),
            2,
            check=lambda t: ticket_problems(t, policy, "demo") or services.check(t),
            make_id=lambda: f"k1-t{next(ids):03d}",
            make_seed=lambda: 7,
            sink=audit_log,
            run_id="k1",
        )
    assert [t.kind for t in accepted] == [TicketKind.CONFIG]  # it corrected itself
    refused = audit_log.events("ticket_invalid")
    assert [r["ticket"]["kind"] for r in refused] == ["data", "data_request"]
    assert all("are the host's" in r["reasons"][0] for r in refused)
    assert "approved_request" in refused[0]["reasons"][0] and "approved_count" in refused[1]["reasons"][0]
    assert b"are the host's" in fake.received[1]  # the proposer is told why, to correct itself
    assert not (services.setup.home.root.parent / "x").exists()
    assert not (services.setup.home.runs / "k1" / "approved").exists()  # nothing was built for it


def test_a_forged_data_ticket_trains_on_nothing_and_writes_nothing_outside_the_home(
    services: HostServices, audit_log: Log, tmp_path: Path
) -> None:
    """Past validation too (the host checks again where the data is built): only the approvals
    record says what was approved, and every path stays inside the home."""
    from agents.approvals import ApprovalQueue
    from segfactory.errors import DataError

    extra = _extra_version(services, tmp_path)
    forged = _ticket("k1-t001", TicketKind.DATA, FORGED_GRANT["change"])
    with pytest.raises(DataError, match="not the data ticket the approvals queue made"):
        services.lineage.plan(forged)
    assert not (services.setup.home.root.parent / "x").exists()
    [granted] = _granted(services, audit_log, "r0-t003", "k1", data=extra.ref, count=2)
    borrowed = _ticket("k1-t002", TicketKind.DATA, {"approved_request": "r0-t003"})  # another's approval
    with pytest.raises(DataError, match="not the data ticket the approvals queue made"):
        services.lineage.plan(borrowed)
    widened = granted.model_copy(update={"change": {**granted.change, "approved_count": 10}})
    with pytest.raises(DataError, match="not the data ticket the approvals queue made"):
        services.lineage.plan(widened)
    queue = ApprovalQueue(services.setup.home.state_db, audit_log)
    queue.request(_ticket("r0-t007", TicketKind.DATA_REQUEST, {"request": "more"}), "r0")  # never decided
    pending = _ticket("r0-t007-data", TicketKind.DATA, {"approved_request": "r0-t007"})
    with pytest.raises(DataError, match=r"holds no approval of it \(it is pending\)"):
        services.lineage.plan(pending)
    with pytest.raises(DataError, match="taken up by run k1, not by run k5"):
        HostServices(services.setup.__class__(**{**services.setup.__dict__, "run_id": "k5"})).lineage.plan(
            granted
        )
    outside = tmp_path / "outside"
    outside.mkdir()
    (services.setup.home.runs / "k1").mkdir(parents=True, exist_ok=True)
    (services.setup.home.runs / "k1" / "approved").symlink_to(outside)
    with pytest.raises(DataError, match="outside the home's runs folder"):
        services.lineage.plan(granted)
    assert list(outside.iterdir()) == []
    (services.setup.home.runs / "k1" / "approved").unlink()
    assert (
        len(read_split(resolve(services.setup.home.root, services.lineage.plan(granted).dataset).train))
        == 24 + 2
    )


def test_approved_keys_an_old_request_holds_grant_nothing(services: HostServices, audit_log: Log) -> None:
    """A request queued before validation refused them, with the LLM's own ``approved_data``: a
    person's approval that grants no data (the console's) leaves the ticket without data."""
    from agents.approvals import ApprovalQueue

    queue = ApprovalQueue(services.setup.home.state_db, audit_log)
    queue.request(
        _ticket("r0-t008", TicketKind.DATA_REQUEST, {"request": "x", "approved_data": "synthetic/v1"}), "r0"
    )
    queue.decide("r0-t008", approve=True, by="alice", count=5)
    [ticket] = queue.approved("k1")
    assert queue.take("r0-t008", "k1")
    assert ticket.change == {"request": "x", "approved_request": "r0-t008"}
    with pytest.raises(UsageError, match="names no dataset version"):
        services.lineage.plan(ticket)


CKPT = "c" * 64  # the promoted ticket's copied-out weights, as its outcome recorded them


def _promote_trained(services: HostServices) -> None:
    """A promoted ticket whose outcome recorded a copied-out checkpoint (what a trained best has)."""
    _promote_with(services)
    rows = [r.line() for r in RunsLayout(services.setup.home).promotions()]
    rows[-1]["checkpoint_sha256"] = CKPT
    RunsLayout(services.setup.home).promotions_file.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_continuation_starts_from_the_incumbents_weights_and_its_fingerprint_names_them(
    services: HostServices,
) -> None:
    _promote_trained(services)
    incumbent = services.incumbent()
    assert incumbent.checkpoint == InitFrom(run_id="k1", ticket_id="k1-p1", sha256=CKPT)
    longer = _ticket("k1-t010", evidence=["recommendation:train-longer-0"]).model_copy(
        update={"continues": "incumbent"}
    )
    plan = services.lineage.plan(longer)
    assert plan.init_from == incumbent.checkpoint and plan.config == incumbent.config
    # the same recipe from fresh weights trains what the incumbent trained: refused as a repeat
    fresh = longer.model_copy(update={"id": "k1-t011", "continues": None})
    assert "trains exactly what its parent" in services.check(fresh)[0]
    assert services.check(longer) == []  # from the incumbent's weights it trains something else
    other = fingerprint(
        plan.config, plan.dataset_hash, plan.code, plan.init_from.model_copy(update={"sha256": "d" * 64})
    )
    assert other != plan.fingerprint  # other weights, another fingerprint
    replicate = longer.model_copy(update={"id": "k1-t010-rep", "replicate_of": longer.id, "seed": 99})
    services.lineage.start(longer)
    assert services.lineage.plan(replicate).init_from == plan.init_from  # same parent weights, new seed


def test_a_continuation_of_a_best_without_weights_is_refused_with_the_reason(services: HostServices) -> None:
    longer = _ticket("k1-t012").model_copy(update={"continues": "incumbent"})  # the best is the classical one
    [reason] = services.check(longer)
    assert "has no copied-out checkpoint to continue from" in reason and "classical baseline" in reason


def test_a_rung_continues_its_own_tickets_recipe_and_weights(services: HostServices) -> None:
    screen = _ticket("k1-t020", change={"optim.lr": 0.003})
    row = services.lineage.start(screen)
    files = services.setup.layout.ticket(screen.id)
    files.root.mkdir(parents=True)
    files.model.write_bytes(b"the screen's model")
    evidence = Evidence(
        model_sha256=sha256_file(files.model),
        model_bytes=18,
        manifest={},
        manifest_file="m.json",
        dev_metrics={"object_f1": 0.3},
        threshold=0.5,
        checkpoint_sha256=CKPT,
        checkpoint_bytes=100,
    )
    outcome = TicketOutcome(
        ticket_id=screen.id, run_id="k1", status=TicketStatus.DONE, device_seconds=30.0, evidence=evidence
    )
    files.outcome.write_text(outcome.model_dump_json())
    rung = _ticket("k1-t021").model_copy(update={"continues": screen.id})
    plan = services.lineage.plan(rung)
    assert plan.config == row.config and plan.parent_fingerprint == row.fingerprint  # its recipe
    assert plan.init_from == InitFrom(run_id="k1", ticket_id=screen.id, sha256=CKPT)  # its weights
    assert plan.parent_sha256 == evidence.model_sha256 and services.check(rung) == []
    missing = _ticket("k1-t022").model_copy(update={"continues": "k1-t099"})
    assert "did not run in run k1" in services.check(missing)[0]


def _done(services: HostServices, ticket_id: str, model_bytes: bytes) -> str:
    """A DONE ticket of the run with a copied-out model (as the runner leaves it); its sha256."""
    files = services.setup.layout.ticket(ticket_id)
    files.root.mkdir(parents=True)
    files.model.write_bytes(model_bytes)
    evidence = Evidence(
        model_sha256=sha256_file(files.model),
        model_bytes=len(model_bytes),
        manifest={},
        manifest_file="m.json",
        dev_metrics={"object_f1": 0.3},
        threshold=0.5,
    )
    outcome = TicketOutcome(ticket_id=ticket_id, run_id="k1", status=TicketStatus.DONE, evidence=evidence)
    files.outcome.write_text(outcome.model_dump_json())
    return evidence.model_sha256


def test_a_packaging_tickets_members_come_from_the_plans_ledger_and_name_its_fingerprint(
    services: HostServices,
) -> None:
    shas = [_done(services, tid, tid.encode()) for tid in ("k1-t030", "k1-t031")]
    layout = services.setup.layout
    layout.append_plan_row(
        PlanRow(ticket_id="k1-t032", phase="package", level=2, budget_s=30, members=["k1-t031", "k1-t030"])
    )
    package = _ticket("k1-t032", TicketKind.PACKAGE, {"flips": ["h"], "min_sizes": [1, 2]})
    plan = services.lineage.plan(package)
    assert [m.sha256 for m in plan.members] == [shas[1], shas[0]] and plan.init_from is None
    assert services.check(package) == []  # it trains nothing its parent trained: it packages
    replicate = package.model_copy(update={"id": "k1-t032-rep", "replicate_of": "k1-t032"})
    assert services.lineage.plan(replicate).members == plan.members  # the same members, by hash
    other = fingerprint(plan.config, plan.dataset_hash, plan.code, None, plan.members[:1])
    assert other != plan.fingerprint  # other members, another fingerprint
    orphan = _ticket("k1-t033", TicketKind.PACKAGE, {"flips": ["h"]})
    assert "has no members in this run's budget plan ledger" in services.check(orphan)[0]


def test_the_host_carve_never_tells_a_ticket_from_its_parent() -> None:
    # a parent trained before the runner carved (or on the base config) and a child that carves
    # differ only in the host's carve: a no-op change must still be refused as its parent's twin
    config = {"epochs": 4, "optim": {"lr": 0.003}}
    carved = config | {"validation": {"fraction": 0.1, "seed": 0}}
    assert fingerprint(config, "d" * 64, {}) == fingerprint(carved, "d" * 64, {})
    assert fingerprint(config, "d" * 64, {}) != fingerprint(config | {"epochs": 5}, "d" * 64, {})
