"""Arm isolation in ``compare``: every arm-run starts from the same incumbent; no arm moves another's bar.

The best lives in the gate's real ledger (SQLite), moved with the kinds the ledger allows; the
arms are stand-ins that promote, so that the rule is checked without training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from controls.compare import run_arms
from controls.compare_report import ArmRun
from controls.isolation import RESTORE_SUFFIX, Incumbent, spent_tiers, start_from
from controls.replay import pairs_for
from gate.ledger import Ledger
from gate.replies import TierState
from segfactory.home import Home


class LedgerStore:
    """``BestStore`` over the gate's ledger itself; ``restore`` records a ``reference`` move as the gate
    does."""

    def __init__(self, path: Path, budget: int = 3) -> None:
        self.ledger = Ledger(path)
        self.ledger.set_best("base", "/m/base.onnx", "init", "baseline")
        self.budget = budget
        for tier in ("confirm-a", "confirm-b", "sealed"):
            self.ledger.add_tier_version(tier, 1, budget)

    def current(self) -> Incumbent:
        best = self.ledger.current_best()
        assert best is not None
        return Incumbent(best["model_sha256"], Path(best["model_path"]))

    def restore(self, incumbent: Incumbent, reason: str) -> None:
        self.ledger.set_best(incumbent.sha256, str(incumbent.model), "reference", reason)

    def promote(self, name: str) -> None:
        self.ledger.set_best(name, f"/m/{name}.onnx", "promotion", "WIN + replicate WIN")

    def fresh_tiers(self) -> dict[str, int]:
        """As the gate's rotation does: a next version of the tier, with the rule's budget."""
        fresh = {}
        for tier in spent_tiers(self.ledger.tier_versions()):
            fresh[tier] = max(r.version for r in self.ledger.tier_versions() if r.tier == tier) + 1
            self.ledger.add_tier_version(tier, fresh[tier], self.budget)
        return fresh

    def query(self, ticket_id: str, tier: str = "confirm-a") -> bool:
        version = max(r.version for r in self.ledger.tier_versions() if r.tier == tier)
        return self.ledger.reserve_query(ticket_id, tier, version, "m")


def promoting_arms(store: LedgerStore, promotions: dict[str, int]) -> tuple[Any, list[tuple[str, int, str]]]:
    seen: list[tuple[str, int, str]] = []

    def run_arm(arm: str, seed: int) -> ArmRun:
        seen.append((arm, seed, store.current().sha256))  # the bar this arm-run is measured against
        for k in range(promotions.get(arm, 0)):
            store.promote(f"{arm}-s{seed}-p{k}")
        return ArmRun(run_id=f"{arm}-{seed}")

    return run_arm, seen


def test_every_arm_run_starts_from_the_same_incumbent(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "ledger.sqlite")
    run_arm, seen = promoting_arms(
        store, {"agent": 1, "sweep-tpe": 2}
    )  # two in a row: retract cannot undo it
    incumbent, results = run_arms(["agent", "sweep-tpe", "nnunet"], 2, run_arm, store)
    assert incumbent.sha256 == "base"
    assert {sha for _, _, sha in seen} == {"base"} and len(seen) == 6
    assert [r.restored_before for r in results["sweep-tpe"]] == [True, True]  # after the agent's promotion
    assert [r.restored_before for r in results["nnunet"]] == [True, True]  # after the sweep's two
    assert [r.restored_before for r in results["agent"]] == [False, False]  # nnunet promoted nothing
    assert all(r.start_best == "base" for runs in results.values() for r in runs)
    assert store.current().sha256 == "base"  # the comparison leaves the best as it found it
    moves = store.ledger.best_history()
    restores = [m for m in moves if m["kind"] == "reference"]
    assert restores and all(m["model_sha256"] == "base" and "arm isolation" in m["reason"] for m in restores)
    assert not [m for m in moves if m["kind"] == "promotion" and m["model_sha256"] == "base"]


def test_no_restore_is_recorded_when_nothing_moved(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "ledger.sqlite")
    run_arm, seen = promoting_arms(store, {})
    run_arms(["sweep-random", "nnunet"], 2, run_arm, store)
    assert [m["kind"] for m in store.ledger.best_history()] == ["init"]
    assert start_from(store, store.current(), "x") is False


def test_a_promotion_after_a_restore_is_paired_with_the_incumbent(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.runs.mkdir(parents=True)
    rows = [
        {"run_id": "agent-0", "ticket_id": "agent-0-t001", "model": "/m/a.onnx", "sha256": "a"},
        {
            "run_id": "cmp",
            "ticket_id": f"cmp{RESTORE_SUFFIX}",
            "model": "/m/base.onnx",
            "sha256": "b",
            "restored": True,
        },
        {"run_id": "sweep-0", "ticket_id": "sweep-0-t003", "model": "/m/s.onnx", "sha256": "s"},
    ]
    (home.runs / "promotions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pair,) = pairs_for(home, {"sweep-0"})
    assert pair.previous == "/m/base.onnx"  # not the agent arm's promotion: it never was this arm's bar
    assert [p.ticket_id for p in pairs_for(home, {"cmp"})] == []  # a restore is not a win


def test_no_arm_run_spends_another_arms_query_budget(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "ledger.sqlite", budget=3)
    answered: dict[str, list[bool]] = {}

    def run_arm(arm: str, seed: int) -> ArmRun:
        # the first arm-run spends every confirm-a query it has, and asks two more
        answered[f"{arm}-{seed}"] = [
            store.query(f"{arm}-{seed}-t{k}") for k in range(5 if arm == "agent" else 1)
        ]
        return ArmRun(run_id=f"{arm}-{seed}")

    _, results = run_arms(["agent", "sweep-tpe", "nnunet"], 2, run_arm, store)
    assert answered["agent-0"] == [True, True, True, False, False]  # the budget holds within an arm-run
    assert all(answered[f"{arm}-{seed}"][0] for arm in ("sweep-tpe", "nnunet", "agent") for seed in (0, 1))
    assert results["agent"][0].fresh_tiers == {}  # nothing queried yet: the tiers are left as they are
    assert results["sweep-tpe"][0].fresh_tiers == {"confirm-a": 2}
    versions = [
        r.fresh_tiers["confirm-a"]
        for runs in zip(*results.values(), strict=True)
        for r in runs
        if r.fresh_tiers
    ]
    assert versions == [2, 3, 4, 5, 6]  # a version of its own for every arm-run after the first
    assert {r.tier: r.version for r in store.ledger.tier_versions() if r.tier != "confirm-a"} == {
        "confirm-b": 1,
        "sealed": 1,
    }  # unqueried tiers and the sealed tier are never redrawn


def test_spent_tiers_reads_only_the_current_version_of_the_queried_tiers() -> None:
    rows = [
        TierState(tier=tier, version=version, budget=30, spent=spent, left=30 - spent)
        for tier, version, spent in (
            ("confirm-a", 1, 30),
            ("confirm-a", 2, 0),
            ("confirm-b", 1, 1),
            ("sealed", 1, 5),
            ("never-queried", 1, 3),
        )
    ]
    assert spent_tiers(rows) == ["confirm-b"]
    assert spent_tiers(rows[:1]) == ["confirm-a"]
    assert spent_tiers([]) == []
