"""``analyse`` and ``propose``: what the loop tries next, and in which order.

First what a person decided (answered escalations, then approved data requests, each once),
then the queue, then new tickets from the proposer over the allowlisted context (the dev
analysis of the current best and the coarse verdict history; trust rule 9). ``data_request``
tickets go to the approvals queue; the loop does not wait for them.
"""

from __future__ import annotations

from agents.context import build_context
from agents.incumbent import DEFAULT_ACTION_EVIDENCE
from agents.judge import Decision
from agents.llm import LLMFailed
from agents.proposer import propose_valid
from agents.state import Awaiting, FactoryState, Round, Update
from agents.steps._base import Step
from segfactory.errors import LimitExceeded
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind

PROPOSE_BATCH = 4  # tickets asked of the proposer when the queue is empty


class ProposeStep(Step):
    def analyse(self, state: FactoryState) -> Update:
        """Analyse the current best; after a promotion, tickets queued for the old best are dropped."""
        analysis = self.d.services.analyse()
        incumbent = self.d.services.incumbent()
        new_round = Round(
            round=len(state.rounds) + 1, first_ticket=state.tickets_run + 1, incumbent=incumbent.sha256
        )
        queue = [q for q in state.queue if q.replicate_of]
        dropped = [q.id for q in state.queue if not q.replicate_of]
        if dropped:
            self.audit(
                state, "tickets_superseded", {"tickets": dropped, "reason": "the best moved; re-analysed"}
            )
        update: Update = {
            "analysis": analysis,
            "rounds": [new_round],
            "reanalyse": False,
            "started_at": state.started_at or self.d.clock(),
            "queue": queue,
        }
        if self.d.default_action and incumbent.trained and self.d.default_budget is not None:
            queue.append(self._default_ticket(state, self.d.default_budget))
            update["next_id"] = state.next_id + 1
        return update

    def _default_ticket(self, state: FactoryState, budget: Budget) -> Ticket:
        """The default action at the same cost: the incumbent retrained with a fresh host-chosen seed."""
        return Ticket(
            id=f"{state.run_id}-t{state.next_id:03d}",
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

    def propose(self, state: FactoryState) -> Update:
        answered = self._take_escalations(state)
        if answered:  # a person answered an escalation: act on it before anything else
            return answered
        approved = self._approved(state)
        if approved:  # approved data requests go first, each once; invalid ones are recorded, not run
            return self._queue_approved(state, approved)
        if state.queue:
            return {}
        return self._new_tickets(state)

    def _new_tickets(self, state: FactoryState) -> Update:
        counter = [state.next_id]

        def make_id() -> str:
            counter[0] += 1
            return f"{state.run_id}-t{counter[0] - 1:03d}"

        planner = self.d.planner
        if planner is not None:  # the budget plan's rungs and final come before new screens
            planned = planner.tickets(state, self.d.services.incumbent(), make_id, self.d.make_seed)
            if planned is not None:
                return self._planned(state, planned, counter[0])
        assert state.analysis is not None, "propose runs after analyse"
        analysis = self.d.services.realise(state.analysis)
        incumbent = self.d.services.incumbent()
        context = build_context(
            analysis,
            state.history,
            incumbent=incumbent.config,
            incumbent_sha256=incumbent.sha256,
            incumbent_has_weights=incumbent.checkpoint is not None,
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
                run_id=state.run_id,
            )
        except LimitExceeded as exc:
            return {"stop_reason": f"budget: {exc}"}
        except LLMFailed as exc:  # bounded retries spent: stop cleanly, the state stays resumable
            self.audit(state, "proposer_failed", {"error": str(exc)})
            return {"stop_reason": f"proposer failed: {exc}"}
        tickets = self._route_requests(state, tickets)
        if planner is not None and not tickets:  # nothing more to screen: on to the rungs early
            planned = planner.tickets(
                state, self.d.services.incumbent(), make_id, self.d.make_seed, screens_done=True
            )
            return self._planned(state, planned or [], counter[0])
        if planner is not None:  # screens: as many as the screen share holds, each at its budget
            fitted = planner.fit_screens(tickets, state.device_seconds)
            if len(fitted) < len(tickets):
                self.audit(
                    state,
                    "screens_trimmed",
                    {"kept": [t.id for t in fitted], "dropped": [t.id for t in tickets[len(fitted) :]]},
                )
            tickets = [t.model_copy(update={"budget": planner.screen_budget(t.budget)}) for t in fitted]
            planner.record_screens(tickets)
        update: Update = {"queue": tickets, "next_id": counter[0]}
        if not tickets:
            update["stop_reason"] = "the proposer has nothing left to try"
        return update

    def _planned(self, state: FactoryState, planned: list[Ticket], next_id: int) -> Update:
        """The plan's own tickets (host-made: a rung or the final), each checked against its
        parent; an empty list means the plan has run its final: the run ends."""
        if not planned:
            assert self.d.planner is not None
            return {"stop_reason": self.d.planner.end_reason(), "next_id": next_id}
        valid = [t for t in planned if not self._refused_by_host(state, t)]
        update: Update = {"queue": valid, "next_id": next_id}
        if not valid:
            update["stop_reason"] = (
                "budget plan: its next tickets were refused (ticket_invalid in the audit log)"
            )
        return update

    def _take_escalations(self, state: FactoryState) -> Update:
        """Escalations a person has answered: approve runs what the coded rule held back
        (promote, or the replicate), deny rejects. Each answer is taken once."""
        if self.d.approvals is None or not state.held:
            return {}
        done = set(state.answered)
        answers = [a for a in self.d.approvals.answered_escalations(state.run_id) if a.id not in done]
        if not answers:
            return {}
        held, queue, awaiting = dict(state.held), list(state.queue), dict(state.awaiting_replicate)
        update: Update = {}
        decisions = []
        for answer in answers:
            item = held.get(answer.ticket_id)
            if item is None or item.confirm_a is None:  # an audit hold is no escalation: nothing to answer
                continue
            del held[answer.ticket_id]
            decision = Decision.REJECT
            if answer.approved and answer.pending == "promote":
                self.d.services.promote(answer.ticket_id)  # the gate still checks both WINs
                decision, update["reanalyse"] = Decision.PROMOTE, True
            elif answer.approved:
                queue.insert(0, self.replicate(item.ticket))
                awaiting[item.ticket.id] = Awaiting(ticket=item.ticket, confirm_a=item.confirm_a)
                decision = Decision.REPLICATE
            reason = (
                f"a person ({answer.by}) answered escalation {answer.id}: "
                f"{'approved' if answer.approved else 'denied'} {answer.pending}"
                + (f" ({answer.reason})" if answer.reason else "")
            )
            decisions.append(self.rule_decision(state, answer.ticket_id, decision, reason))
        update["held"], update["queue"], update["awaiting_replicate"] = held, queue, awaiting
        update["decisions"], update["answered"] = decisions, [a.id for a in answers]
        return update

    def _approved(self, state: FactoryState) -> list[Ticket]:
        if self.d.approvals is None:
            return []
        taken = set(state.taken_approvals)
        return [t for t in self.d.approvals.approved(state.run_id) if t.id not in taken]

    def _queue_approved(self, state: FactoryState, approved: list[Ticket]) -> Update:
        assert self.d.approvals is not None
        taken = [t for t in approved if self.d.approvals.take(t.change["approved_request"], state.run_id)]
        valid = [t for t in taken if not self._invalid(state, t)]
        return {"queue": [*state.queue, *valid], "taken_approvals": [t.id for t in taken]}

    def _refused_by_host(self, state: FactoryState, ticket: Ticket) -> bool:
        """A host-made ticket passes the host's own checks (it must not train its parent again);
        the proposer's validation, budgets included, is for proposals: the plan writes its own."""
        problems = self.d.services.check(ticket)
        if problems:
            self.audit(
                state, "ticket_invalid", {"ticket": ticket.model_dump(mode="json"), "reasons": problems}
            )
        return bool(problems)

    def _invalid(self, state: FactoryState, ticket: Ticket) -> bool:
        problems = self.d.check(ticket)
        if problems:
            self.audit(
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
                    self.d.approvals.request(ticket, state.run_id)
            else:
                self.audit(
                    state, "data_request_dropped", {"ticket": ticket.id, "reason": "no approvals queue"}
                )
        return runnable

    def _requested_before(self, state: FactoryState, ticket: Ticket) -> bool:
        """The same request (hypothesis and change) already waits or was decided in this run."""
        assert self.d.approvals is not None
        same = [
            r.id
            for r in self.d.approvals.requests()
            if r.run_id == state.run_id
            and (r.ticket.hypothesis, r.ticket.change) == (ticket.hypothesis, ticket.change)
        ]
        if same:
            self.audit(state, "data_request_duplicate", {"ticket": ticket.id, "same_as": same[0]})
        return bool(same)


__all__ = ["PROPOSE_BATCH", "ProposeStep"]
