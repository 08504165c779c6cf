"""The factory loop as a LangGraph ``StateGraph``.

analyse → propose → run → gate → judge → record, then back to propose, or on to
milestone → report once a budget (wall time, device-seconds, tickets, LLM tokens) is spent or
the proposer has nothing left. Checkpoints go to SQLite after every node, so a run resumes
from the last completed node (``thread_id`` = run id).

What the graph needs from the rest of the factory is the :class:`FactoryServices` protocol
(analysis, runner, gate, milestone, report); the graph state holds no score of any kind:
tickets, coarse verdicts, dev-win flags and budget counters only (trust rules 4, 7, 9).
"""

from __future__ import annotations

import logging
import operator
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypedDict, cast

from pydantic import BaseModel, ConfigDict, Field

from agents.approvals import ApprovalQueue
from agents.audit_hold import AuditHold, held_update
from agents.context import DevAnalysis, VerdictEntry, build_context
from agents.incumbent import DEFAULT_ACTION_EVIDENCE, Incumbent
from agents.judge import Decision, Judge, JudgeDecision, JudgeInput, TicketMeta, rule_decision
from agents.llm import LLMFailed, LLMUsage
from agents.proposer import Proposer, propose_valid
from segfactory.budgets import RunCaps
from segfactory.errors import GateError, LimitExceeded
from segfactory.records import (
    Actor,
    Arm,
    Budget,
    CoarseVerdict,
    Direction,
    ExpectedEffect,
    Ticket,
    TicketKind,
)
from segfactory.seams import AuditSink

if TYPE_CHECKING:  # langgraph is imported only when a graph is built: the CLI starts without it
    from langgraph.graph.state import CompiledStateGraph

log = logging.getLogger(__name__)

PROPOSE_BATCH = 4  # tickets asked of the proposer when the queue is empty
DEVICE_LEFT_SHARE = 0.5  # no new ticket when less than this share of an average ticket's device time is left
RECURSION_LIMIT = 10_000  # graph steps per invoke; a run ends by budget long before this
KILL_AT_ENV = "SEGFACTORY_TEST_KILL_AT"  # test-only fault injection (see ``fault_point``)


def fault_point(name: str) -> None:
    """Test-only: SIGKILL this (host-side graph) process when ``$SEGFACTORY_TEST_KILL_AT`` is ``name``.

    It lets the end-to-end resume tests kill a real ``segfactory run`` at a point no outside
    signal can hit deterministically. Only this process reads the variable; sandboxes start with
    a cleared environment, so it never reaches agent code.
    """
    if os.environ.get(KILL_AT_ENV) == name:
        log.warning("%s=%s: kill -9 of this process (test-only fault injection)", KILL_AT_ENV, name)
        os.kill(os.getpid(), signal.SIGKILL)


class RunOutcome(BaseModel):
    """What the host learnt from training a ticket. No score: the dev comparison is a flag."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ticket_id: str
    status: Literal[
        "dev_win", "dev_loss", "failed", "control"
    ]  # control: a default-action re-run, never submitted
    device_seconds: float = Field(ge=0)  # spent, for the budget
    model_ref: str | None = None  # where the host put model.onnx; None unless it trained
    reason: str = ""


class FactoryServices(Protocol):
    """The runner, gate and reporting side, as the graph uses them.

    ``run_ticket`` trains one ticket in the sandbox and compares it with the current best on dev
    (host-computed), and must be idempotent by ticket id (a resumed run may call it again); the
    worker gets at most ``wall_left_s`` of the run's wall time.
    ``submit`` queries the gate (confirm-a, or confirm-b with ``replicate_of``); the gate answers
    a repeated ticket id from its cache without spending twice. ``promote`` moves the global best
    to the ticket's model after the judge's ``promote`` (idempotent: a resumed run may repeat it).
    """

    def analyse(self) -> DevAnalysis: ...

    def realise(self, analysis: DevAnalysis) -> DevAnalysis: ...

    def incumbent(self) -> Incumbent: ...

    def run_ticket(self, ticket: Ticket, wall_left_s: float | None = None) -> RunOutcome: ...

    def submit(self, ticket: Ticket, model_ref: str, replicate_of: str | None) -> CoarseVerdict: ...

    def promote(self, ticket_id: str) -> None: ...

    def milestone(self, run_id: str) -> None: ...

    def report(self, run_id: str, stop_reason: str) -> None: ...


class FactoryState(TypedDict, total=False):
    """The checkpointed state: JSON-friendly, no scores.

    The append-only lists carry LangGraph's ``operator.add`` reducer: a node returns only the
    items it adds, and the graph appends them, so no node can drop or rewrite what an earlier
    step recorded (history, decisions, rounds, taken approvals, answered escalations).
    """

    run_id: str
    started_at: float
    analysis: dict[str, Any]
    queue: list[dict[str, Any]]
    current: dict[str, Any] | None
    outcome: dict[str, Any] | None
    verdict: dict[str, Any] | None
    awaiting_replicate: dict[str, dict[str, Any]]  # original id -> {"ticket": ..., "confirm_a": verdict}
    history: Annotated[list[dict[str, Any]], operator.add]
    decisions: Annotated[list[dict[str, Any]], operator.add]
    device_seconds: float
    tickets_run: int
    next_id: int
    taken_approvals: Annotated[list[str], operator.add]  # approved data tickets already queued (ids)
    stop_reason: str
    reanalyse: bool  # the best moved: analyse the new best before proposing again
    rounds: Annotated[
        list[dict[str, Any]], operator.add
    ]  # one per analysis: {"round", "incumbent", "first_ticket"} (no score)
    since_dev_win: int  # tickets in a row without a dev win (the plateau rule)
    held: dict[str, dict[str, Any]]  # escalated ticket id -> {"ticket", "confirm_a", "pending"}
    trained: list[
        dict[str, Any]
    ]  # trained alongside the current ticket, not yet judged: {"ticket", "outcome"}
    answered: Annotated[list[str], operator.add]  # escalation item ids already acted on


@dataclass
class LoopDeps:
    """Everything the nodes call. ``check`` validates a ticket (see ``agents.validate``)."""

    services: FactoryServices
    proposer: Proposer
    judge: Judge
    sink: AuditSink
    caps: RunCaps
    usage: LLMUsage
    check: Callable[[Ticket], list[str]]
    make_seed: Callable[[], int]
    clock: Callable[[], float] = time.time
    approvals: ApprovalQueue | None = None  # data_request tickets and escalations go here
    plateau_tickets: int = 0  # stop after this many tickets in a row without a dev win (0: never)
    default_action: bool = False  # each round on a trained best starts with a fresh-seed re-run (a control)
    default_budget: Budget | None = None  # the budget of that re-run: the proposer's default ticket budget
    # No new ticket when less than this share of an average ticket's device time is left. 0: a new
    # ticket starts while any device time is left, as a sweep's trials do (``compare`` sets it so
    # that every arm stops by the same rule).
    device_left_share: float = DEVICE_LEFT_SHARE
    # Tickets trained at once: the run node takes up to this many from the head of the queue and
    # trains them together (each admitted by the run's one scheduler); they are then gated,
    # judged and recorded one at a time, in queue order, before the loop re-analyses or proposes.
    concurrency: int = 1
    # A ticket with audit findings is held before the gate (``agents.audit_hold``); None: never held.
    audit_hold: Callable[[str, Ticket], AuditHold | None] | None = None


class _Nodes:
    def __init__(self, deps: LoopDeps) -> None:
        self.d = deps

    def _audit(self, state: FactoryState, event: str, payload: dict[str, Any]) -> None:
        self.d.sink.append(Actor.SYSTEM.value, event, payload, run_id=state["run_id"])

    def analyse(self, state: FactoryState) -> FactoryState:
        """Analyse the current best; after a promotion, tickets queued for the old best are dropped."""
        analysis = self.d.services.analyse()
        new_round = {
            "round": len(state.get("rounds", [])) + 1,
            "first_ticket": state.get("tickets_run", 0) + 1,
            "incumbent": self._incumbent_ref(),
        }
        queue = [q for q in state.get("queue", []) if q.get("replicate_of")]
        dropped = [q["id"] for q in state.get("queue", []) if not q.get("replicate_of")]
        if dropped:
            self._audit(
                state, "tickets_superseded", {"tickets": dropped, "reason": "the best moved; re-analysed"}
            )
        update: FactoryState = {
            "analysis": analysis.model_dump(mode="json"),
            "rounds": [new_round],
            "reanalyse": False,
            "started_at": state.get("started_at") or self.d.clock(),
            "queue": queue,
        }
        if (
            self.d.default_action
            and self.d.services.incumbent().trained
            and self.d.default_budget is not None
        ):
            queue.append(self._default_ticket(state, self.d.default_budget).model_dump(mode="json"))
            update["next_id"] = state.get("next_id", 1) + 1
        return update

    def _incumbent_ref(self) -> str:
        return self.d.services.incumbent().sha256

    def _default_ticket(self, state: FactoryState, budget: Budget) -> Ticket:
        """The default action at the same cost: the incumbent retrained with a fresh host-chosen seed."""
        return Ticket(
            id=f"{state['run_id']}-t{state.get('next_id', 1):03d}",
            arm=Arm.AGENT,
            kind=TicketKind.CONFIG,
            hypothesis="default action: the current best retrained with a fresh seed (the control that "
            "scores this round's predictions)",
            change={},
            budget=budget,
            expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.NONE, size=0.0),
            evidence=[DEFAULT_ACTION_EVIDENCE],
            seed=self.d.make_seed(),
        )

    def propose(self, state: FactoryState) -> FactoryState:
        answered = self._take_escalations(state)
        if answered:  # a person answered an escalation: act on it before anything else
            return answered
        approved = self._approved(state)
        if approved:  # approved data requests go first, each once; invalid ones are recorded, not run
            assert self.d.approvals is not None
            approved = [
                t for t in approved if self.d.approvals.take(t.change["approved_request"], state["run_id"])
            ]
            valid = [t for t in approved if not self._invalid(state, t)]
            return {
                "queue": [*state.get("queue", []), *(t.model_dump(mode="json") for t in valid)],
                "taken_approvals": [t.id for t in approved],
            }
        if state.get("queue"):
            return {}
        counter = [state.get("next_id", 1)]

        def make_id() -> str:
            counter[0] += 1
            return f"{state['run_id']}-t{counter[0] - 1:03d}"

        analysis = self.d.services.realise(DevAnalysis.model_validate(state["analysis"]))
        context = build_context(
            analysis,
            [VerdictEntry.model_validate(h) for h in state.get("history", [])],
            incumbent=self.d.services.incumbent().config,
        )
        try:
            tickets = propose_valid(
                self.d.proposer,
                context,
                PROPOSE_BATCH,
                check=self.d.check,
                make_id=make_id,
                make_seed=self.d.make_seed,
                sink=self.d.sink,
                run_id=state["run_id"],
            )
        except LimitExceeded as exc:
            return {"stop_reason": f"budget: {exc}"}
        except LLMFailed as exc:  # bounded retries spent: stop cleanly, the state stays resumable
            self._audit(state, "proposer_failed", {"error": str(exc)})
            return {"stop_reason": f"proposer failed: {exc}"}
        tickets = self._route_requests(state, tickets)
        update: FactoryState = {"queue": [t.model_dump(mode="json") for t in tickets], "next_id": counter[0]}
        if not tickets:
            update["stop_reason"] = "the proposer has nothing left to try"
        return update

    def _take_escalations(self, state: FactoryState) -> FactoryState:
        """Escalations a person has answered: approve runs what the coded rule held back
        (promote, or the replicate), deny rejects. Each answer is taken once."""
        if self.d.approvals is None or not state.get("held"):
            return {}
        done = set(state.get("answered", []))
        answers = [a for a in self.d.approvals.answered_escalations(state["run_id"]) if a.id not in done]
        if not answers:
            return {}
        held, queue = dict(state.get("held", {})), list(state.get("queue", []))
        awaiting, decisions = dict(state.get("awaiting_replicate", {})), []
        update: FactoryState = {}
        for answer in answers:
            item = held.pop(answer.ticket_id, None)
            if item is None:
                continue
            decision = Decision.REJECT
            if answer.approved and answer.pending == "promote":
                self.d.services.promote(answer.ticket_id)  # the gate still checks both WINs
                decision, update["reanalyse"] = Decision.PROMOTE, True
            elif answer.approved:
                ticket = Ticket.model_validate(item["ticket"])
                queue.insert(0, self._replicate(ticket).model_dump(mode="json"))
                awaiting[ticket.id] = {"ticket": item["ticket"], "confirm_a": item["confirm_a"]}
                decision = Decision.REPLICATE
            record = JudgeDecision(
                ticket_id=answer.ticket_id,
                decision=decision,
                by="rule",
                reason=f"a person ({answer.by}) answered escalation {answer.id}: "
                f"{'approved' if answer.approved else 'denied'} {answer.pending}"
                + (f" ({answer.reason})" if answer.reason else ""),
            )
            self.d.sink.append(
                Actor.JUDGE.value,
                "judge_decision",
                {"decision": record.model_dump(mode="json")},
                run_id=state["run_id"],
            )
            decisions.append(record.model_dump(mode="json"))
        return {
            **update,
            "held": held,
            "queue": queue,
            "awaiting_replicate": awaiting,
            "decisions": decisions,
            "answered": [a.id for a in answers],
        }

    def _replicate(self, ticket: Ticket) -> Ticket:
        return ticket.model_copy(
            update={"id": f"{ticket.id}-rep", "replicate_of": ticket.id, "seed": self.d.make_seed()}
        )

    def _approved(self, state: FactoryState) -> list[Ticket]:
        if self.d.approvals is None:
            return []
        taken = set(state.get("taken_approvals", []))
        return [t for t in self.d.approvals.approved(state["run_id"]) if t.id not in taken]

    def _invalid(self, state: FactoryState, ticket: Ticket) -> bool:
        problems = self.d.check(ticket)
        if problems:
            self._audit(
                state, "ticket_invalid", {"ticket": ticket.model_dump(mode="json"), "reasons": problems}
            )
        return bool(problems)

    def _route_requests(self, state: FactoryState, tickets: list[Ticket]) -> list[Ticket]:
        """``data_request`` tickets go to the approvals queue (the loop does not wait for them)."""
        runnable = []
        for ticket in tickets:
            if ticket.kind is not TicketKind.DATA_REQUEST:
                runnable.append(ticket)
            elif self.d.approvals is not None:
                if not self._requested_before(state, ticket):
                    self.d.approvals.request(ticket, state["run_id"])
            else:
                self._audit(
                    state, "data_request_dropped", {"ticket": ticket.id, "reason": "no approvals queue"}
                )
        return runnable

    def _requested_before(self, state: FactoryState, ticket: Ticket) -> bool:
        """The same request (hypothesis and change) already waits or was decided in this run."""
        if self.d.approvals is None:
            return False
        same = [
            r.id
            for r in self.d.approvals.requests()
            if r.run_id == state["run_id"]
            and (r.ticket.hypothesis, r.ticket.change) == (ticket.hypothesis, ticket.change)
        ]
        if same:
            self._audit(state, "data_request_duplicate", {"ticket": ticket.id, "same_as": same[0]})
        return bool(same)

    def run(self, state: FactoryState) -> FactoryState:
        trained = list(state.get("trained", []))
        if trained:  # trained together with an earlier ticket: its turn to be gated and judged
            item = trained.pop(0)
            return {
                "trained": trained,
                "current": item["ticket"],
                "outcome": item["outcome"],
                "verdict": None,
            }
        queue = list(state["queue"])
        room = max(
            1, self.d.caps.tickets - state.get("tickets_run", 0)
        )  # a batch never passes the ticket cap
        batch = [
            Ticket.model_validate(queue.pop(0))
            for _ in range(min(max(1, self.d.concurrency), len(queue), room))
        ]
        wall_left = self.d.caps.wall_seconds - (self.d.clock() - state["started_at"])
        for ticket in batch:
            log.info("running ticket %s: %s", ticket.id, ticket.hypothesis[:80])
        outcomes = self._train(state, batch, wall_left)
        spent = sum(o.device_seconds for o in outcomes)
        return {
            "queue": queue,
            "current": batch[0].model_dump(mode="json"),
            "outcome": outcomes[0].model_dump(mode="json"),
            "trained": [
                {"ticket": t.model_dump(mode="json"), "outcome": o.model_dump(mode="json")}
                for t, o in zip(batch[1:], outcomes[1:], strict=True)
            ],
            "verdict": None,
            "device_seconds": state.get("device_seconds", 0.0) + spent,
            "tickets_run": state.get("tickets_run", 0) + len(batch),
        }

    def _train(self, state: FactoryState, batch: list[Ticket], wall_left: float) -> list[RunOutcome]:
        """Each ticket of the batch through ``run_ticket``, all at once when there are several."""
        if len(batch) == 1:
            return [self.d.services.run_ticket(batch[0], wall_left_s=wall_left)]
        from concurrent.futures import ThreadPoolExecutor

        self._audit(
            state,
            "tickets_trained_together",
            {"tickets": [t.id for t in batch], "concurrency": self.d.concurrency},
        )
        with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix="ticket") as pool:
            return list(pool.map(lambda t: self.d.services.run_ticket(t, wall_left_s=wall_left), batch))

    def gate(self, state: FactoryState) -> FactoryState:
        outcome = RunOutcome.model_validate(state["outcome"])
        ticket = Ticket.model_validate(state["current"])
        if self.d.audit_hold is not None and (hold := self.d.audit_hold(state["run_id"], ticket)):
            return cast(FactoryState, held_update(state, hold, self.d.sink))  # no query, no promotion
        if outcome.status != "dev_win" or outcome.model_ref is None:
            return {"verdict": None}  # a dev loss, a failure or a control spends no query
        verdict = self.d.services.submit(ticket, outcome.model_ref, ticket.replicate_of)
        fault_point("after_verdict")  # tests: a kill -9 after the gate answered, before the checkpoint
        return {"verdict": verdict.model_dump(mode="json")}

    def judge(self, state: FactoryState) -> FactoryState:
        ticket = Ticket.model_validate(state["current"])
        if state.get("verdict") is None:
            return self._replicate_lost_on_dev(state, ticket)
        verdict = CoarseVerdict.model_validate(state["verdict"])
        awaiting = dict(state.get("awaiting_replicate", {}))
        if ticket.replicate_of is None:
            judged = JudgeInput(ticket=TicketMeta.of(ticket), confirm_a=verdict)
        else:
            original = awaiting.pop(ticket.replicate_of)
            judged = JudgeInput(
                ticket=TicketMeta.of(Ticket.model_validate(original["ticket"])),
                confirm_a=CoarseVerdict.model_validate(original["confirm_a"]),
                replicate_id=ticket.id,
                confirm_b=verdict,
            )
        decision = self.d.judge.decide(judged)
        reanalyse = False
        if decision.decision is Decision.PROMOTE:  # promotion is code: only after both WINs
            try:
                self.d.services.promote(decision.ticket_id)
                reanalyse = True
            except GateError as exc:  # e.g. its confirm-a WIN was against a best another ticket replaced
                decision = JudgeDecision(
                    ticket_id=decision.ticket_id,
                    decision=Decision.REJECT,
                    by="rule",
                    reason=f"promotion refused by the gate: {exc}",
                )
                self.d.sink.append(
                    Actor.JUDGE.value,
                    "judge_decision",
                    {"decision": decision.model_dump(mode="json")},
                    run_id=state["run_id"],
                )
        update: FactoryState = {
            "decisions": [decision.model_dump(mode="json")],
            "awaiting_replicate": awaiting,
        }
        if reanalyse:
            update["reanalyse"] = True
        if decision.decision is Decision.REPLICATE:  # a new training seed, chosen by the host
            awaiting[ticket.id] = {
                "ticket": ticket.model_dump(mode="json"),
                "confirm_a": verdict.model_dump(mode="json"),
            }
            update["queue"] = [self._replicate(ticket).model_dump(mode="json"), *state.get("queue", [])]
        if decision.decision is Decision.ESCALATE:
            update.update(self._escalate(state, judged, decision))
        return update

    def _escalate(self, state: FactoryState, judged: JudgeInput, decision: JudgeDecision) -> FactoryState:
        """Hold the ticket for a person when the coded rule would have promoted or replicated."""
        coded = rule_decision(judged).decision
        if self.d.approvals is None or coded not in (Decision.PROMOTE, Decision.REPLICATE):
            return {}  # e.g. a spent tier: a person rotates it; nothing is held
        original = judged.ticket.id
        item = (state.get("awaiting_replicate", {}) or {}).get(original) or {
            "ticket": state["current"],
            "confirm_a": judged.confirm_a.model_dump(mode="json"),
        }
        ticket = Ticket.model_validate(item["ticket"])
        item_id = self.d.approvals.escalate(ticket, decision, state["run_id"], pending=coded.value)
        self.d.sink.append(
            Actor.JUDGE.value,
            "ticket_held",
            {"ticket": original, "escalation": item_id, "pending": coded.value},
            run_id=state["run_id"],
        )
        return {"held": {**state.get("held", {}), original: {**item, "pending": coded.value}}}

    def _replicate_lost_on_dev(self, state: FactoryState, ticket: Ticket) -> FactoryState:
        """A replicate that is no dev win spends no confirm-b query: its original is rejected."""
        awaiting = dict(state.get("awaiting_replicate", {}))
        if ticket.replicate_of is None or ticket.replicate_of not in awaiting:
            return {}
        awaiting.pop(ticket.replicate_of)
        decision = JudgeDecision(
            ticket_id=ticket.replicate_of,
            decision=Decision.REJECT,
            by="rule",
            reason=f"the replicate {ticket.id} did not win on dev; no confirm-b query spent",
        )
        self.d.sink.append(
            Actor.JUDGE.value,
            "judge_decision",
            {"decision": decision.model_dump(mode="json")},
            run_id=state["run_id"],
        )
        return {
            "decisions": [decision.model_dump(mode="json")],
            "awaiting_replicate": awaiting,
        }

    def record(self, state: FactoryState) -> FactoryState:
        ticket = Ticket.model_validate(state["current"])
        outcome = RunOutcome.model_validate(state["outcome"])
        if state.get("verdict") is not None:
            entry = VerdictEntry.from_verdict(ticket, CoarseVerdict.model_validate(state["verdict"]))
        else:
            entry = VerdictEntry.not_submitted(ticket, _NOT_SUBMITTED.get(outcome.status, "FAILED"))
        self._audit(
            state, "ticket_recorded", {"ticket": ticket.id, "verdict": entry.verdict, "tier": entry.tier}
        )
        since = state.get("since_dev_win", 0)
        if ticket.replicate_of is None and outcome.status != "control":
            since = 0 if outcome.status == "dev_win" else since + 1
        update: FactoryState = {
            "history": [entry.model_dump(mode="json")],
            "current": None,
            "outcome": None,
            "verdict": None,
            "since_dev_win": since,
        }
        spent = "" if state.get("trained") else self._spent({**state, **update})
        if spent:  # trained tickets waiting to be judged are judged first: their device time is spent
            update["stop_reason"] = spent
        return update

    def _spent(self, state: FactoryState) -> str:
        caps = self.d.caps
        elapsed, done = self.d.clock() - state["started_at"], max(1, state.get("tickets_run", 0))
        batch = max(1, self.d.concurrency)  # tickets the next run step trains together
        if elapsed >= caps.wall_seconds:
            return f"budget: wall time {caps.wall_seconds:g} s spent"
        if elapsed + batch * elapsed / done > caps.wall_seconds:  # the next ticket(s), at the average pace
            return f"budget: wall time {caps.wall_seconds:g} s would be passed by the next ticket"
        spent, share = state.get("device_seconds", 0.0), self.d.device_left_share
        # A confirm-a WIN's replicate runs even past the device budget: its query is spent, and
        # without the replicate the win can be neither promoted nor rejected (a sweep's trial
        # likewise includes its replicate).
        owed = any(q.get("replicate_of") for q in state.get("queue", []))
        if spent >= caps.device_seconds and not owed:
            return f"budget: device time {caps.device_seconds:g} s spent"
        if (
            caps.device_seconds - spent < share * batch * spent / done and not owed
        ):  # the next would overshoot
            return (
                f"budget: device time {caps.device_seconds:g} s: {caps.device_seconds - spent:.0f} s left, "
                f"under {share:g} of a ticket at the average {spent / done:.0f} s"
            )
        if state.get("tickets_run", 0) >= caps.tickets:
            return f"budget: {caps.tickets} tickets run"
        if self.d.usage.tokens >= caps.llm_tokens > 0:
            return f"budget: {caps.llm_tokens} LLM tokens spent"
        if 0 < self.d.plateau_tickets <= state.get("since_dev_win", 0):
            return (
                f"plateau: {self.d.plateau_tickets} tickets in a row without a dev win "
                "(policies/run.yaml plateau.tickets_without_dev_win)"
            )
        return ""

    def milestone(self, state: FactoryState) -> FactoryState:
        self.d.services.milestone(state["run_id"])
        return {}

    def report(self, state: FactoryState) -> FactoryState:
        self.d.services.report(state["run_id"], state.get("stop_reason", ""))
        self._audit(
            state,
            "run_end",
            {"stop_reason": state.get("stop_reason", ""), "tickets_run": state.get("tickets_run", 0)},
        )
        return {}


_NOT_SUBMITTED: dict[str, Literal["DEV_LOSS", "FAILED", "CONTROL"]] = {
    "dev_loss": "DEV_LOSS",
    "failed": "FAILED",
    "control": "CONTROL",
}


def _after_propose(state: FactoryState) -> str:
    if state.get("stop_reason"):
        return "milestone"
    if state.get("reanalyse"):
        return "analyse"
    return "run" if state.get("queue") else "milestone"


def _after_record(state: FactoryState) -> str:
    if state.get("stop_reason"):
        return "milestone"
    # Tickets trained together with the current one are judged before anything else, even when the
    # best just moved: their device time is spent, and the gate compares each with its best of now.
    if state.get("trained"):
        return "run"
    if state.get("reanalyse"):  # the best moved: its weaknesses, not the old best's, come next
        return "analyse"
    return "run" if state.get("queue") else "propose"


def build_graph(deps: LoopDeps, checkpoint_db: Path) -> CompiledStateGraph[FactoryState]:
    """The compiled graph with a SQLite checkpointer at ``checkpoint_db``."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    nodes = _Nodes(deps)
    graph = StateGraph(FactoryState)
    for name in ("analyse", "propose", "run", "gate", "judge", "record", "milestone", "report"):
        graph.add_node(name, getattr(nodes, name))
    graph.add_edge(START, "analyse")
    graph.add_edge("analyse", "propose")
    graph.add_conditional_edges("propose", _after_propose, ["run", "analyse", "milestone"])
    graph.add_edge("run", "gate")
    graph.add_edge("gate", "judge")
    graph.add_edge("judge", "record")
    graph.add_conditional_edges("record", _after_record, ["run", "propose", "analyse", "milestone"])
    graph.add_edge("milestone", "report")
    graph.add_edge("report", END)
    conn = sqlite3.connect(checkpoint_db, check_same_thread=False, timeout=30)
    return graph.compile(checkpointer=SqliteSaver(conn))


def run_loop(graph: CompiledStateGraph[FactoryState], run_id: str, *, resume: bool = False) -> FactoryState:
    """Start run ``run_id``, or with ``resume`` continue it from its last checkpoint."""
    config: Any = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    start: FactoryState | None = None if resume else {"run_id": run_id}
    # durability="sync": each checkpoint is written before the next node starts, so a kill -9
    # loses at most the node that was running (the default "async" may lose several).
    return cast(FactoryState, graph.invoke(start, config, durability="sync"))
