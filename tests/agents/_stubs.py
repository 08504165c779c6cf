"""Test-only stand-ins for the runner and gate (built in another issue), shared by the graph tests.

``StubFactoryServices``: scripted dev outcomes, a gate that caches by ticket id and counts
queries, optional crash points, and a planted "confirm score" sentinel that only the stub gate
knows. With ``ledger`` set, runs, queries and the gate cache persist in a JSON file, so a
process killed with SIGKILL and a resumed one share them (as the real gate's ledger would).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.context import DevAnalysis
from agents.graph import LoopDeps, build_graph
from agents.incumbent import Incumbent
from agents.judge import Judge
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.state import RunOutcome
from agents.validate import ticket_problems
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.records import Budget, CoarseVerdict, Ticket, TicketKind, Verdict
from tests.agents.conftest import recommendation

SENTINEL = 0.987654321  # a confirm score only the stub gate knows


class Crash(Exception):
    """Stands in for a kill -9 at a chosen point."""


@dataclass
class StubFactoryServices:
    """Test stub of the runner + gate: outcome and verdict per recommendation key."""

    dev: dict[str, str]  # change key -> dev_win | dev_loss | failed
    gate: dict[str, list[Verdict]]  # change key -> verdicts for confirm-a, then confirm-b
    runs: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    cache: dict[str, CoarseVerdict] = field(default_factory=dict)
    crash_in_run: set[str] = field(default_factory=set)
    crash_after_gate: set[str] = field(default_factory=set)
    ended: list[str] = field(default_factory=list)
    ledger: Path | None = None  # persist runs, queries and the gate cache across processes
    kill_at: str | None = None  # "run:<ticket id>" or "gate:<ticket id>": SIGKILL this process there
    requests: tuple[str, ...] = ()  # change keys recommended as data_request tickets
    on_run: Any = None  # called with each ticket before it runs (a person acting meanwhile)
    promoted: list[str] = field(default_factory=list)  # ticket ids the graph promoted (this process)
    home: Path | None = None  # where the stub writes its scores as the real host and gate do (sentinel tests)

    def __post_init__(self) -> None:
        if self.ledger is not None and self.ledger.is_file():
            data = json.loads(self.ledger.read_text())
            self.runs, self.queries, self.ended = data["runs"], data["queries"], data["ended"]
            self.cache = {k: CoarseVerdict.model_validate(v) for k, v in data["cache"].items()}

    def _save(self) -> None:
        if self.ledger is not None:
            self.ledger.write_text(
                json.dumps(
                    {
                        "runs": self.runs,
                        "queries": self.queries,
                        "ended": self.ended,
                        "cache": {k: v.model_dump(mode="json") for k, v in self.cache.items()},
                    }
                )
            )

    @staticmethod
    def _write(path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(line)

    def _maybe_die(self, point: str) -> None:
        if self.kill_at == point:
            os.kill(os.getpid(), signal.SIGKILL)

    def analyse(self) -> DevAnalysis:
        recs = [
            recommendation(f"q{i}", key, 1).model_copy(update={"kind": TicketKind.DATA_REQUEST})
            for i, key in enumerate(self.requests, 1)
        ]
        recs += [
            recommendation(f"r{i}", key, 1) for i, key in enumerate(self.dev, 1) if key not in self.requests
        ]
        return DevAnalysis(summary="dev IoU 0.6", recommendations=tuple(recs))

    def realise(self, analysis: DevAnalysis) -> DevAnalysis:
        return analysis  # the stub's recommendations are concrete already

    def incumbent(self) -> Incumbent:
        return Incumbent(
            sha256="stub-best", model="models/best.onnx", config={"epochs": 1}, dataset="synthetic/v1"
        )

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome:
        if self.on_run is not None:
            self.on_run(ticket)
        self.runs.append(ticket.id)
        self._save()
        self._maybe_die(f"run:{ticket.id}")
        if ticket.id in self.crash_in_run:
            self.crash_in_run.discard(ticket.id)
            raise Crash(ticket.id)
        status = self.dev[next(iter(ticket.change))]
        if self.home is not None:  # the host's dev comparison, people only, as HostServices writes it
            self._write(
                self.home / "runs" / "people" / "dev_comparisons.jsonl",
                json.dumps({"ticket_id": ticket.id, "object_f1": SENTINEL}) + "\n",
            )
        return RunOutcome(
            ticket_id=ticket.id,
            status=status,
            device_seconds=10,  # type: ignore[arg-type]
            model_ref=None if status == "failed" else f"models/{ticket.id}.onnx",
        )

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict:
        if ticket.id not in self.cache:  # the gate answers a repeated ticket id from its cache
            self.queries.append(ticket.id)
            verdicts = self.gate[next(iter(ticket.change))]
            verdict = verdicts[1 if replicate_of else 0]
            if self.home is not None:  # the gate's confirm score, in the vault, as the real gate keeps it
                self._write(
                    self.home / "vault" / "ledger-scores.jsonl",
                    json.dumps({"ticket_id": ticket.id, "confirm_a_object_f1": SENTINEL}) + "\n",
                )
            self.cache[ticket.id] = CoarseVerdict(
                ticket_id=ticket.id,
                tier="confirm-b" if replicate_of else "confirm-a",
                verdict=verdict,
                queries_left=10 - len(self.queries),
            )
            self._save()
        self._maybe_die(f"gate:{ticket.id}")
        if ticket.id in self.crash_after_gate:
            self.crash_after_gate.discard(ticket.id)
            raise Crash(ticket.id)
        return self.cache[ticket.id]

    def promote(self, ticket_id: str) -> None:
        self.promoted.append(ticket_id)

    def milestone(self, run_id: str) -> None:
        self.ended.append("milestone")
        self._save()

    def report(self, run_id: str, stop_reason: str) -> None:
        self.ended.append(f"report: {stop_reason}")
        self._save()


def make_graph(
    services: StubFactoryServices,
    log: Any,
    tmp_path: Path,
    tickets: int = 20,
    approvals: Any = None,
    audit_hold: Any = None,
) -> Any:
    """The loop with the rules proposer over the stub services; checkpoints in tmp_path/state.sqlite."""
    policy = load_budget_policy()
    seeds = itertools.count(100)
    deps = LoopDeps(
        services=services,
        judge=Judge(log),
        sink=log,
        usage=LLMUsage(),
        proposer=get_proposer(
            "rules",
            sink=log,
            usage=LLMUsage(),
            default_budget=Budget(device_seconds=60, epochs=2),
            caps=Budget(device_seconds=120, epochs=10),
        ),
        caps=RunCaps(wall_seconds=600, device_seconds=600, tickets=tickets, llm_tokens=0),
        check=lambda t: ticket_problems(t, policy, "demo"),
        make_seed=lambda: next(seeds),
        approvals=approvals,
        audit_hold=audit_hold,
    )
    return build_graph(deps, tmp_path / "state.sqlite")


def make_services(**kw: Any) -> StubFactoryServices:
    return StubFactoryServices(
        dev={"optim.lr": "dev_win", "epochs": "dev_loss", "grad_accum": "dev_win", "batch_size": "failed"},
        gate={"optim.lr": [Verdict.WIN, Verdict.WIN], "grad_accum": [Verdict.NO_WIN]},
        **kw,
    )


def main() -> None:
    """``python -m tests.agents._stubs HOME WORKDIR RUN_ID KILL_AT|- [--resume]``: one run in its own
    process."""
    import sys

    from agents.graph import run_loop
    from audit import AuditLog, MemoryAnchorStore
    from segfactory.home import Home

    home, workdir, run_id, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    services = make_services(ledger=workdir / "ledger.json", kill_at=None if kill_at == "-" else kill_at)
    with AuditLog(Home(home), MemoryAnchorStore()) as log:
        graph = make_graph(services, log, workdir)
        state = run_loop(graph, run_id, resume="--resume" in sys.argv)
    # the channel values as the checkpointer revived them (not re-validated by the state model)
    raw = graph.get_state({"configurable": {"thread_id": run_id}}).values
    revived = [*raw["history"], *raw["decisions"], *raw["rounds"]]
    sys.stdout.write(
        json.dumps(
            {
                "history": [h.ticket_id for h in state.history],
                "decisions": [(d.ticket_id, d.decision) for d in state.decisions],
                "revived": sorted({type(v).__name__ for v in revived}),
            }
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
