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
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents import report as rpt
from agents._predictions import write_summary
from agents._realise import NOT_EXECUTABLE_FILE
from agents.approvals import ApprovalQueue
from agents.audit_hold import AuditHolds
from agents.code_arm import with_code_arm
from agents.graph import DEVICE_LEFT_SHARE, LoopDeps, build_graph, run_loop
from agents.judge import Judge, default_judge, make_reviewer
from agents.llm import LLMUsage
from agents.proposer import get_proposer
from agents.proposer.explore import ExploringProposer
from agents.run_policy import DATASET
from agents.services import DEV_COMPARISONS, TICKETS_FILE, HostServices, RunSetup
from agents.validate import ticket_problems
from audit.anchor import anchor_from_reply
from audit.gate_events import pull
from gate.win_rule import load_win_rule
from segfactory.budgets import RunCaps, load_budget_policy
from segfactory.files import read_jsonl
from segfactory.home import SOURCE_ROOT, Home
from segfactory.records import Actor, Budget
from synthetic.versions import resolve

USAGE_FILE = "llm_usage.json"  # runs/<id>/: LLM totals, carried over a resume


def _config(run_id: str) -> Any:  # a langgraph RunnableConfig
    return {"configurable": {"thread_id": run_id}}


def _usage(home: Home, run_id: str, cap: int) -> Any:
    path = home.runs / run_id / USAGE_FILE
    usage = LLMUsage.model_validate_json(path.read_text()) if path.is_file() else LLMUsage()
    usage.token_cap = cap or None
    return usage


SEED_BOUND = 2**31  # host-chosen seeds lie in [0, this)


def host_seeds(record: dict[str, Any], *, resumed: bool) -> Callable[[], int]:
    """The run's source of host-chosen seeds: ``os.urandom`` unless ``run --seed`` fixed it.

    A fixed seed reproduces an uninterrupted run (the same tickets get the same seeds). A resumed
    run draws fresh ones: a replayed stream could hand a replicate the seed its original trained
    with.
    """
    seed = record.get("seed")
    if seed is None or resumed:
        return lambda: secrets.randbelow(SEED_BOUND)
    stream = random.Random(int(seed))
    return lambda: stream.randrange(SEED_BOUND)


def _deps(req: Any, record: dict[str, Any], services: Any, audit: Any, defaults: Any, usage: Any) -> Any:
    policy = load_budget_policy()
    ticket_caps = policy.for_profile(record["profile"]).ticket

    proposer = get_proposer(
        record["proposer"],
        sink=audit,
        usage=usage,
        default_budget=defaults.ticket,
        caps=Budget(device_seconds=ticket_caps.max_device_seconds, epochs=ticket_caps.max_epochs),
        run_id=record["run_id"],
        base_first=not services.incumbent().trained,
    )
    make_seed = host_seeds(record, resumed=bool(req.resume))
    if defaults.explore:  # when the analysis has nothing new, TPE around the incumbent fills the batch
        proposer = ExploringProposer(proposer, defaults.ticket, seed=make_seed())

    def check(ticket: Any) -> list[str]:
        config = services.incumbent().config  # the change applies to the incumbent's config
        return ticket_problems(ticket, policy, record["profile"], base_config=config) or services.check(
            ticket
        )

    fill = bool(record.get("fill_budget"))  # a compare arm: stop only on the budget, as a sweep does
    reviewer = make_reviewer(
        record.get("judge") or default_judge(record["proposer"]),
        sink=audit,
        usage=usage,
        run_id=record["run_id"],
    )
    deps = LoopDeps(
        services=services,
        proposer=proposer,
        judge=Judge(audit, reviewer=reviewer, run_id=record["run_id"]),
        sink=audit,
        caps=RunCaps.model_validate(record["caps"]),
        usage=usage,
        check=check,
        make_seed=make_seed,
        approvals=ApprovalQueue(req.home.state_db, audit),
        plateau_tickets=0 if fill else defaults.plateau.tickets_without_dev_win,
        default_action=defaults.default_action,
        default_budget=defaults.ticket,
        device_left_share=0.0 if fill else DEVICE_LEFT_SHARE,
        concurrency=int(record.get("concurrency", 1)),
        audit_hold=AuditHolds(req.home.root).hold,
    )
    if record.get("code_agent"):  # code drafts get their files from the code-editing agent first
        deps.proposer = with_code_arm(
            deps,
            proposer=record["proposer"],
            backend=record["backend"],
            home=req.home,
            run_id=record["run_id"],
        )
    return deps


def execute(req: Any, record: dict[str, Any], client: Any, audit: Any, defaults: Any) -> RunSummary:
    home, run_id = req.home, record["run_id"]
    rule, _ = load_win_rule()
    setup = RunSetup(
        home=home,
        run_id=run_id,
        backend=record["backend"],
        dataset=resolve(home.root, DATASET),
        base_config=SOURCE_ROOT / record.get("base_config", defaults.base_config),
        gate=client,
        audit=audit,
        dev_margin=rule.dev_rule.dev_margin,
        progress=req.progress,
        threshold=rule.threshold,
        max_epochs=load_budget_policy().for_profile(record["profile"]).ticket.max_epochs,
        concurrency=int(record.get("concurrency", 1)),
    )
    services = HostServices(setup)
    services.catalogue()  # a catalogue that does not parse stops the run here, naming the file and line
    usage = _usage(home, run_id, int(record["caps"]["llm_tokens"]))
    deps = _deps(req, record, services, audit, defaults, usage)
    graph = build_graph(deps, home.state_db)
    snapshot = graph.get_state(_config(run_id))
    resume = bool(req.resume) and bool(snapshot.values)
    if resume and not snapshot.next:
        req.progress(f"run {run_id} already finished; nothing to do")
        return _summary(home, run_id, snapshot.values, resumed=False, already_finished=True)
    services.state_reader = lambda: graph.get_state(_config(run_id)).values
    services.report_writer = lambda svc, rid, stop: _write_report(svc, rid, stop, record, usage, client, deps)
    audit.append(Actor.SYSTEM, "run_resumed" if resume else "run_start", dict(record), run_id=run_id)
    req.progress(
        f"run {run_id}: {'resuming' if resume else 'starting'} (profile {record['profile']}, "
        f"proposer {record['proposer']}, caps {record['caps']})"
    )
    pull(client, audit)
    state = run_loop(graph, run_id, resume=resume)
    pull(client, audit)
    (home.runs / run_id / USAGE_FILE).write_text(usage.model_dump_json(indent=2))
    return _summary(home, run_id, dict(state), resumed=resume, already_finished=False)


def _write_report(
    services: Any, run_id: str, stop_reason: str, record: dict[str, Any], usage: Any, client: Any, deps: Any
) -> None:
    home, people = services.home, services.people
    services.setup.audit.flush_anchor(run_id)
    state = services.state_reader()
    tickets = {t["id"]: t for t in read_jsonl(people / TICKETS_FILE)}
    rows = rpt.ticket_rows(state, home.tickets_dir(run_id), read_jsonl(people / DEV_COMPARISONS), tickets)
    approvals = [
        {"id": a.id, "status": a.status, "hypothesis": a.ticket.hypothesis}
        for a in deps.approvals.requests()
        if a.run_id == run_id
    ]
    milestone_file = people / "milestones" / f"{run_id}-final.json"
    analyses = sorted((home.runs / run_id / "analysis").glob("*/report.json"))

    predictions = write_summary(home, run_id)
    report = rpt.RunReport(
        run_id=run_id,
        profile=record["profile"],
        proposer=record["proposer"],
        backend=record["backend"],
        base_config=record.get("base_config"),
        sized_note=record.get("sized_note", ""),
        concurrency=int(record.get("concurrency", 1)),
        stop_reason=stop_reason,
        started_at=record.get("started_at"),
        ended_at=time.time(),
        win_rule_sha256=record.get("win_rule_sha256"),
        tickets=rows,
        not_run=[{"id": q["id"], "hypothesis": q["hypothesis"]} for q in state.get("queue", [])],
        approvals=approvals,
        counts=rpt.counts(rows, state),
        device_seconds=float(state.get("device_seconds", 0.0)),
        milestone=json.loads(milestone_file.read_text()) if milestone_file.is_file() else None,
        audit=rpt.audit_summary(home, run_id, anchor_from_reply(client.get_anchor()), anchor_checked=True),
        llm_usage=usage.model_dump(mode="json"),
        analysis_dir=str(analyses[0].parent) if analyses else None,
        refused=rpt.refused_drafts(home, run_id),
        rounds=rpt.loop_rounds(home, run_id, state),
        predictions=predictions["rows"],
        hit_rate=predictions["hit_rate"],
        not_executable=read_jsonl(people / NOT_EXECUTABLE_FILE),
        **rpt.home_records(home),
    )
    paths = rpt.write(report, people, home.tickets_dir(run_id))
    services.setup.progress(f"report: {paths['md']} and {paths['html']}")


def finished_summary(home: Home, run_id: str) -> RunSummary:
    """The summary of a run that already ended (``--resume`` of it is a no-op)."""
    people = home.people_dir(run_id)
    data = json.loads((people / "report.json").read_text()) if (people / "report.json").is_file() else {}
    state = {
        "stop_reason": data.get("stop_reason", ""),
        "tickets_run": data.get("counts", {}).get("tickets", 0),
        "device_seconds": data.get("device_seconds", 0.0),
    }
    return _summary(home, run_id, state, resumed=False, already_finished=True)


class RunSummary(BaseModel):
    """One run as ``segfactory run --json`` reports it: counts and where the report is, no scores
    beyond the prediction hit rate the report already carries."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    hit_rate: dict[str, Any]
    predictions: list[dict[str, Any]]
    rounds: int
    resumed: bool
    already_finished: bool
    stop_reason: str
    tickets_run: int
    device_seconds: float
    counts: dict[str, Any]
    report_md: str
    report_html: str

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _summary(
    home: Home, run_id: str, state: dict[str, Any], *, resumed: bool, already_finished: bool
) -> RunSummary:
    people = home.people_dir(run_id)
    counts: dict[str, Any] = {}
    report: dict[str, Any] = {}
    if (people / "report.json").is_file():
        report = json.loads((people / "report.json").read_text())
        counts = report.get("counts", {})
    return RunSummary(
        run_id=run_id,
        hit_rate=report.get("hit_rate", {}),
        predictions=report.get("predictions", []),
        rounds=len(report.get("rounds", [])),
        resumed=resumed,
        already_finished=already_finished,
        stop_reason=state.get("stop_reason", ""),
        tickets_run=state.get("tickets_run", 0),
        device_seconds=state.get("device_seconds", 0.0),
        counts=counts,
        report_md=str(people / "report.md"),
        report_html=str(people / "report.html"),
    )
