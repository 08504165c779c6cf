"""The inside of ``segfactory run`` once the gate and the audit log are up (see ``agents.run``).

Builds ``LoopDeps`` (proposer, judge, caps, validation, host-chosen seeds, the approvals queue)
over ``HostServices``, runs or resumes the graph, and writes the report from the final
checkpointed state. A resumed run that already reached its end does nothing.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from agents import report as rpt
from agents._predictions import calibration, write_summary
from agents.approvals import ApprovalQueue
from agents.audit_hold import AuditHolds
from agents.budget_plan import BudgetPlanner, load_plan
from agents.code_arm import with_code_arm
from agents.graph import DEVICE_LEFT_SHARE, LoopDeps, build_graph, run_loop
from agents.judge import Judge, default_judge, make_reviewer
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.proposer.explore import ExploringProposer
from agents.run_policy import DATASET, RunDefaults
from agents.run_setup import RunRequest, RunSetup
from agents.services import HostServices
from agents.space import load_space
from agents.state import FactoryState
from agents.validate import ticket_problems
from audit import AuditLog
from audit.anchor import anchor_from_reply
from audit.gate_events import pull
from gate.client import GateClient
from gate.win_rule import load_win_rule
from segfactory.budgets import TicketCaps, load_budget_policy
from segfactory.home import SOURCE_ROOT, Home
from segfactory.layout import RunLayout, RunRecord
from segfactory.records import Actor, Budget, Ticket
from synthetic.versions import resolve

if TYPE_CHECKING:
    from langgraph.types import RunnableConfig

SEED_BOUND = 2**31  # host-chosen seeds lie in [0, this)


def _config(run_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": run_id}}


def _usage(layout: RunLayout, cap: int) -> LLMUsage:
    path = layout.llm_usage
    usage = LLMUsage.model_validate_json(path.read_text()) if path.is_file() else LLMUsage()
    usage.token_cap = cap or None
    return usage


def host_seeds(record: RunRecord, *, resumed: bool) -> Callable[[], int]:
    """The run's source of host-chosen seeds: ``os.urandom`` unless ``run --seed`` fixed it.

    A fixed seed reproduces an uninterrupted run (the same tickets get the same seeds). A resumed
    run draws fresh ones: a replayed stream could hand a replicate the seed its original trained
    with.
    """
    if record.seed is None or resumed:
        return lambda: secrets.randbelow(SEED_BOUND)
    stream = random.Random(int(record.seed))
    return lambda: stream.randrange(SEED_BOUND)


def _deps(
    req: RunRequest,
    record: RunRecord,
    services: HostServices,
    audit: AuditLog,
    defaults: RunDefaults,
    usage: LLMUsage,
) -> LoopDeps:
    policy = load_budget_policy()
    ticket_caps = policy.for_profile(record.profile).ticket
    assert record.caps is not None, "an agent run records its caps at start"
    proposer = get_proposer(
        record.proposer,
        sink=audit,
        usage=usage,
        default_budget=defaults.ticket,
        caps=Budget(device_seconds=ticket_caps.max_device_seconds, epochs=ticket_caps.max_epochs),
        run_id=record.run_id,
        base_first=not services.incumbent().trained,
    )
    make_seed = host_seeds(record, resumed=bool(req.resume))
    if defaults.explore:  # when the analysis has nothing new, TPE around the incumbent fills the batch
        space = load_space()
        proposer = ExploringProposer(
            proposer,
            defaults.ticket,
            space=space,
            seed=make_seed(),
            storage=f"sqlite:///{RunLayout(req.home, record.run_id).search_db}",
            study_name=record.run_id,
            observations=lambda: services.observations(list(space.params)),
        )

    def check(ticket: Ticket) -> list[str]:
        config = services.incumbent().config  # the change applies to the incumbent's config
        problems = ticket_problems(ticket, policy, record.profile, base_config=config)
        return problems or services.check(ticket)

    reviewer = make_reviewer(
        record.judge or default_judge(record.proposer), sink=audit, usage=usage, run_id=record.run_id
    )
    deps = LoopDeps(
        services=services,
        proposer=proposer,
        judge=Judge(audit, reviewer=reviewer, run_id=record.run_id),
        sink=audit,
        caps=record.caps,
        usage=usage,
        check=check,
        make_seed=make_seed,
        approvals=ApprovalQueue(req.home.state_db, audit),
        plateau_tickets=0 if record.fill_budget else defaults.plateau.tickets_without_dev_win,
        default_action=defaults.default_action,
        default_budget=defaults.ticket,
        device_left_share=0.0 if record.fill_budget else DEVICE_LEFT_SHARE,
        concurrency=record.concurrency,
        audit_hold=AuditHolds(req.home.root).hold,
        planner=_planner(record, req.home, services, ticket_caps),
    )
    if record.code_agent:  # code drafts get their files from the code-editing agent first
        deps.proposer = with_code_arm(
            deps, proposer=record.proposer, backend=record.backend, home=req.home, run_id=record.run_id
        )
    return deps


def _planner(record: RunRecord, home: Home, services: HostServices, caps: TicketCaps) -> BudgetPlanner | None:
    """The profile's budget plan (``policies/budget_plan.yaml``), or None when it has none."""
    plan = load_plan(record.profile)
    if plan is None or record.caps is None:
        return None
    layout = RunLayout(home, record.run_id)
    return BudgetPlanner(plan, layout, record.caps, caps, lambda: services.dev_scores())


def execute(
    req: RunRequest, record: RunRecord, client: GateClient, audit: AuditLog, defaults: RunDefaults
) -> RunSummary:
    home, run_id = req.home, record.run_id
    layout = RunLayout(home, run_id)
    rule, _ = load_win_rule()
    setup = RunSetup(
        home=home,
        run_id=run_id,
        backend=record.backend,
        dataset=resolve(home.root, DATASET),
        base_config=SOURCE_ROOT / (record.base_config or defaults.base_config),
        gate=client,
        audit=audit,
        dev_margin=rule.dev_rule.dev_margin,
        progress=req.progress,
        threshold=rule.threshold,
        max_epochs=load_budget_policy().for_profile(record.profile).ticket.max_epochs,
        concurrency=record.concurrency,
    )
    services = HostServices(setup)
    services.realiser.catalogue()  # a catalogue that does not parse stops the run here, naming its line
    assert record.caps is not None, "an agent run records its caps at start"
    usage = _usage(layout, record.caps.llm_tokens)
    deps = _deps(req, record, services, audit, defaults, usage)
    graph = build_graph(deps, home.state_db)
    snapshot = graph.get_state(_config(run_id))
    resume = bool(req.resume) and bool(snapshot.values)
    if resume and not snapshot.next:
        req.progress(f"run {run_id} already finished; nothing to do")
        return _summary(home, run_id, FactoryState.of(snapshot.values), resumed=False, already_finished=True)

    def write_report(run_id: str, stop_reason: str) -> None:
        state = FactoryState.of(graph.get_state(_config(run_id)).values)
        _write_report(setup, state, stop_reason, record, usage, deps)

    services.report_writer = write_report
    audit.append(Actor.SYSTEM, "run_resumed" if resume else "run_start", record.line(), run_id=run_id)
    req.progress(
        f"run {run_id}: {'resuming' if resume else 'starting'} (profile {record.profile}, "
        f"proposer {record.proposer}, caps {record.caps.model_dump()})"
    )
    pull(client, audit)
    state = run_loop(graph, run_id, resume=resume)
    pull(client, audit)
    layout.llm_usage.write_text(usage.model_dump_json(indent=2))
    return _summary(home, run_id, state, resumed=resume, already_finished=False)


def _write_report(
    setup: RunSetup, state: FactoryState, stop_reason: str, record: RunRecord, usage: LLMUsage, deps: LoopDeps
) -> None:
    home, run_id, layout = setup.home, setup.run_id, setup.layout
    setup.audit.flush_anchor(run_id)
    promotions = setup.runs.promotions()
    rows = rpt.ticket_rows(state, layout, promotions)
    milestone = rpt.read_milestone(layout)
    predictions = write_summary(home, run_id)
    assert deps.approvals is not None
    report = rpt.RunReport(
        run_id=run_id,
        profile=record.profile,
        proposer=record.proposer,
        backend=record.backend,
        base_config=record.base_config,
        sized_note=record.sized_note,
        concurrency=record.concurrency,
        code_agent=record.code_agent,
        fill_budget=record.fill_budget,
        gate_tiers=sorted({t.tier for t in setup.gate.status().tiers}),
        stop_reason=stop_reason,
        started_at=record.started_at,
        ended_at=time.time(),
        win_rule_sha256=record.win_rule_sha256,
        headline=rpt.headline(milestone, rpt.read_milestone(layout, "chain"), promotions, run_id),
        tickets=rows,
        not_run=[{"id": q.id, "hypothesis": q.hypothesis} for q in state.queue],
        approvals=rpt.approval_rows(deps.approvals, run_id),
        counts=rpt.counts(rows, state),
        device_seconds=state.device_seconds,
        milestone=milestone.as_json() if milestone is not None else None,
        audit=rpt.audit_summary(
            home, run_id, anchor_from_reply(setup.gate.get_anchor()), anchor_checked=True
        ),
        llm_usage=usage.model_dump(mode="json"),
        analysis_dir=rpt.first_analysis(layout, state),
        refused=rpt.refused_drafts(home, run_id),
        rounds=rpt.loop_rounds(layout, state),
        predictions=[r.line() for r in predictions.rows],
        hit_rate=predictions.hit_rate.model_dump(mode="json"),
        calibration=[c.model_dump(mode="json") for c in calibration(home, run_id)],
        not_executable=[row.line() for row in layout.not_executable()],
        budget_plan=rpt.plan_spend(layout, rows, deps.planner.plan if deps.planner else None),
        **rpt.home_records(home),
    )
    paths = rpt.write(report, layout.people, layout.tickets)
    setup.progress(f"report: {paths['md']} and {paths['html']}")


class _WrittenReport(BaseModel):
    """What a run's summary repeats from its written ``report.json`` (absent: the defaults)."""

    model_config = ConfigDict(extra="ignore")

    stop_reason: str = ""
    device_seconds: float = 0.0
    counts: dict[str, int] = Field(default_factory=dict)
    rounds: list[object] = Field(default_factory=list)  # counted only
    predictions: list[dict[str, object]] = Field(default_factory=list)  # repeated as written
    hit_rate: dict[str, object] = Field(default_factory=dict)  # repeated as written

    @classmethod
    def read(cls, layout: RunLayout) -> _WrittenReport:
        path = layout.report("json")
        return cls.model_validate(json.loads(path.read_text()) if path.is_file() else {})


def finished_summary(home: Home, run_id: str) -> RunSummary:
    """The summary of a run that already ended (``--resume`` of it is a no-op)."""
    data = _WrittenReport.read(RunLayout(home, run_id))
    state = FactoryState(
        run_id=run_id,
        stop_reason=data.stop_reason,
        tickets_run=data.counts.get("tickets", 0),
        device_seconds=data.device_seconds,
    )
    return _summary(home, run_id, state, resumed=False, already_finished=True)


class RunSummary(BaseModel):
    """One run as ``segfactory run --json`` reports it: counts and where the report is, no scores
    beyond the prediction hit rate the report already carries."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    hit_rate: dict[str, object]  # report.json's, as written
    predictions: list[dict[str, object]]  # report.json's, as written
    rounds: int
    resumed: bool
    already_finished: bool
    stop_reason: str
    tickets_run: int
    device_seconds: float
    counts: dict[str, int]
    report_md: str
    report_html: str

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def _summary(
    home: Home, run_id: str, state: FactoryState, *, resumed: bool, already_finished: bool
) -> RunSummary:
    layout = RunLayout(home, run_id)
    report = _WrittenReport.read(layout)
    return RunSummary(
        run_id=run_id,
        hit_rate=report.hit_rate,
        predictions=report.predictions,
        rounds=len(report.rounds),
        resumed=resumed,
        already_finished=already_finished,
        stop_reason=state.stop_reason,
        tickets_run=state.tickets_run,
        device_seconds=state.device_seconds,
        counts=report.counts,
        report_md=str(layout.report("md")),
        report_html=str(layout.report("html")),
    )
