"""A planted weakness: train data without small voids leads the loop to name them, try a fix, score it.

A real demo home (``segfactory init``), then a training version drawn by the same generator with
no pore under 6 px across (its dev split is the home's own, small voids included). The loop runs
on it with the real runner, bwrap sandbox, analysis, action catalogue and prediction scoring; only
the gate is a scripted stand-in (the base ticket and its replicate WIN, everything else NO_WIN),
since what is under test is the loop, not the gate's statistics. The promoted base model never saw
a small void; the re-analysis of it must name a small-size slice, the loop must try the targeted
top-up for it on that model, and the prediction must be scored on dev, whichever way it goes.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gate.replies import GateStatus
from segfactory.records import CoarseVerdict, Verdict
from tests.agents.conftest import gate_status

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

SMALL_DIAMETER_PX = 6.0  # the planted version's pores start here (the demo's start at 2 px)
PLANTED_SEED = 20261201  # the planted train split's generator seed
TICKETS = 6  # base, its replicate, then up to four tickets on the promoted model (it ends after the fix)


@dataclass
class ScriptedGate:
    """The gate's interface with scripted verdicts: WIN for the base ticket and its replicate."""

    best: str
    tickets: Path
    verdicts: dict[str, str] = field(default_factory=dict)

    def status(self) -> GateStatus:
        return gate_status(self.best)

    def submit(
        self,
        model: Any,
        data: Any,
        ticket_id: str,
        replicate_of: str | None = None,
        run_id: str | None = None,
    ) -> CoarseVerdict:
        win = ticket_id.endswith("-t001") or ticket_id.endswith("-t001-rep")
        self.verdicts[ticket_id] = "WIN" if win else "NO_WIN"
        return CoarseVerdict(
            ticket_id=ticket_id,
            tier="confirm-b" if replicate_of else "confirm-a",
            verdict=Verdict.WIN if win else Verdict.NO_WIN,
            queries_left=9,
        )

    def promote(self, ticket_id: str) -> str:
        from segfactory.records import sha256_file

        self.best = str(sha256_file(self.tickets / ticket_id / "model.onnx"))
        return self.best

    def milestone(self, *args: Any) -> dict[str, Any]:
        from segfactory.errors import GateError

        raise GateError("no sealed tier in this test")

    def pull_events(self, after: int) -> dict[str, Any]:
        return {"events": []}

    def ack_events(self, up_to: int) -> dict[str, Any]:
        return {}


def _without_small_voids(home_root: Path, tmp: Path) -> Any:
    """The home's train split drawn again with the generator's pore diameters starting above the
    small range: the same count, parts and other parameters, no void under SMALL_DIAMETER_PX."""
    from synthetic import generate
    from synthetic.extend import base_params
    from synthetic.params import make_params
    from synthetic.splits import read_split
    from synthetic.versions import create_version, resolve

    base = resolve(home_root, "synthetic/v1")
    train = read_split(base.train, mmap=True)
    params = make_params(**{**base_params(train.manifest).model_dump(), "diameter_min": SMALL_DIAMETER_PX})
    out = generate(len(train), int(train.images.shape[1]), PLANTED_SEED, params).write(tmp / "train")
    return create_version(
        home_root, "synthetic", {"train": out, "dev": None}, parent=base.ref, approve_it=True
    )


def _small_slice(change: dict[str, Any]) -> bool:
    return str(change.get("synthetic", {}).get("slice", "")).startswith("size<")


def test_a_size_range_missing_from_training_is_named_tried_and_scored(tmp_path: Path) -> None:
    from agents.graph import LoopDeps, build_graph, run_loop
    from agents.judge import Judge
    from agents.llm import LLMUsage
    from agents.proposer.rules import RulesProposer
    from agents.run_setup import RunSetup
    from agents.services import HostServices
    from agents.validate import ticket_problems
    from audit import AuditLog
    from audit.anchor import MemoryAnchorStore
    from segfactory.budgets import RunCaps, load_budget_policy
    from segfactory.home import Home
    from segfactory.layout import BASELINE_MODEL
    from segfactory.records import Budget, TicketKind, sha256_file
    from tests.conftest import REPO

    root = tmp_path / "home"
    env = {**os.environ, "SEGFACTORY_NO_USER_SEPARATION": "1"}
    init = subprocess.run(
        [sys.executable, "-m", "segfactory", "init", "--profile", "demo", "--home", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
    )
    assert init.returncode == 0, init.stderr[-2000:]
    home = Home(root)
    planted = _without_small_voids(root, tmp_path)
    run_id = "planted1"
    with AuditLog(home, MemoryAnchorStore()) as audit:
        gate = ScriptedGate(str(sha256_file(root / BASELINE_MODEL)), home.tickets_dir(run_id))
        setup = RunSetup(
            home=home,
            run_id=run_id,
            backend="bwrap",
            dataset=planted,
            base_config=REPO / "configs" / "run-demo.yaml",
            gate=gate,
            audit=audit,
            dev_margin=0.005,
            max_epochs=10,
            progress=lambda line: sys.stderr.write(line + "\n"),
        )
        services = HostServices(setup)
        policy = load_budget_policy()
        seeds = itertools.count(11)
        deps = LoopDeps(
            services=services,
            proposer=RulesProposer(Budget(device_seconds=120, epochs=4), base_first=True),
            judge=Judge(audit, run_id=run_id),
            sink=audit,
            usage=LLMUsage(),
            caps=RunCaps(wall_seconds=3600, device_seconds=3000, tickets=TICKETS, llm_tokens=0),
            check=lambda t: (
                ticket_problems(t, policy, "demo", base_config=services.incumbent().config)
                or services.check(t)
                or only_the_fix_once_promoted(t)
            ),
            make_seed=lambda: next(seeds),
        )
        run_ticket = services.run_ticket

        def only_the_fix_once_promoted(ticket: Any) -> list[str]:
            """On the promoted model only the small-size top-up trains: the others (whichever the
            analysis ranks first) are not under test, and each would cost a minute of training."""
            if not services.incumbent().trained or ticket.replicate_of or _small_slice(ticket.change):
                return []
            return ["not under test: only the small-size top-up trains on the promoted model"]

        def run_then_end_after_the_fix(ticket: Any, wall_left_s: float | None = None) -> Any:
            outcome = run_ticket(
                ticket, wall_left_s
            )  # the prediction is scored on dev inside, with the outcome
            if ticket.kind is TicketKind.DATA and _small_slice(ticket.change):
                deps.caps = deps.caps.model_copy(update={"tickets": 0})  # what follows is not under test
            return outcome

        services.run_ticket = run_then_end_after_the_fix  # type: ignore[method-assign]
        state = run_loop(build_graph(deps, tmp_path / "state.sqlite"), run_id)

    assert [r.round for r in state.rounds] == [1, 2], "the promotion must re-analyse the new best"
    promoted = services.incumbent()
    assert promoted.trained and promoted.dataset == planted.ref
    analysis = state.analysis  # the re-analysis of the promoted model
    assert analysis is not None
    small = [r for r in analysis.recommendations if r.kind is TicketKind.DATA and _small_slice(r.change)]
    assert small, f"the analysis did not name a small-size slice: {[r.id for r in analysis.recommendations]}"
    tickets = [
        json.loads(line) for line in (home.people_dir(run_id) / "tickets.jsonl").read_text().splitlines()
    ]
    fixes = [
        t for t in tickets if t["kind"] == "data" and t["change"]["synthetic"]["slice"].startswith("size<")
    ]
    assert fixes, "the loop did not try a top-up for the small voids on the promoted model"
    lineage = services.lineage.lineage()
    assert lineage[fixes[0]["id"]].parent_sha256 == promoted.sha256  # tried on the model that misses them
    assert lineage[fixes[0]["id"]].dataset != planted.ref  # a top-up of the planted version, really
    rows = [
        json.loads(line) for line in (home.people_dir(run_id) / "predictions.jsonl").read_text().splitlines()
    ]
    scored = [r for r in rows if r.get("stage") == "dev" and r["ticket_id"] == fixes[0]["id"]]
    assert scored and scored[0]["held"] in (True, False) and scored[0]["observed_change"] is not None
