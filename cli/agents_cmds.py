"""CLI commands for agents: ``run``, ``approvals list|approve|deny``, ``report``. See docs/cli.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import typer

from agents.approvals import ApprovalQueue
from agents.judge import check_judge_spec
from agents.proposer import KNOWN_PROPOSERS
from audit import AuditLog
from audit.anchor import gate_anchor_store
from cli._common import AUTO, MAX_CONCURRENCY, HomeOpt, JsonOpt, concurrency_choice, emit_json, home_for
from cli._drop import continue_unprivileged
from segfactory.errors import HomeError, UsageError
from segfactory.home import Home
from segfactory.text import inert
from segfactory.units import parse_duration
from synthetic.versions import resolve

approvals_app = typer.Typer(
    help="Data requests and judge escalations waiting for a person: list, approve, deny.",
    no_args_is_help=True,
)
PROFILES = ("demo", "default")
BACKENDS = ("docker", "bwrap")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("run")(run_cmd)
    app.command("report")(report_cmd)
    app.add_typer(approvals_app, name="approvals")


def _progress(line: str) -> None:
    """Progress goes to stderr, so that ``--json`` keeps stdout to one object; a line can quote a
    sandbox's or a model's text, so it is made inert first."""
    sys.stderr.write(inert(line, multiline=False) + "\n")
    sys.stderr.flush()


def _seconds(text: str | None, flag: str) -> float | None:
    if text is None:
        return None

    try:
        return parse_duration(text)
    except Exception as exc:
        raise UsageError(f"{flag} {text!r}: {exc}") from None


KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}  # local:URL needs none


def _check_key(proposer: str, flag: str = "--proposer") -> None:
    """A vendor provider without its key fails here, before any set-up (keys come only from the env)."""
    import os

    env = KEY_ENV.get(proposer.split(":", 1)[0])
    if env and not os.environ.get(env):
        shown = proposer if flag == "--proposer" else f"llm:{proposer}"
        raise UsageError(f"{env} is not set; export it to use {flag} {shown}, or use {flag} rules")


def _check_judge(judge: str | None, proposer: str, code_agent: bool) -> None:
    """A bad --judge, its missing key, or --code-agent without an LLM proposer: refused before any set-up."""
    if judge is not None:
        check_judge_spec(judge)
        if judge != "rules":
            _check_key(judge.removeprefix("llm:"), flag="--judge")
    if code_agent and proposer == "rules":
        raise UsageError(
            "--code-agent needs an LLM proposer (--proposer openai:MODEL, anthropic:MODEL or local:URL): "
            "the code-editing agent uses the proposer's provider"
        )


def _profile_of(home: Home, asked: str) -> str:
    existing = str(home.info().get("profile", asked))
    if existing != asked:
        _progress(f"home {home.root} was created with the {existing} profile; using it (not {asked})")
    return existing


def run_cmd(
    profile: Annotated[
        str, typer.Option("--profile", help="demo (<= 15 min on 2 CPU cores) or default (overnight).")
    ] = "demo",
    budget: Annotated[
        str | None, typer.Option("--budget", help="Device time for the run, e.g. 10m (within budgets.yaml).")
    ] = None,
    wall: Annotated[str | None, typer.Option("--wall", help="Wall-clock limit of the run, e.g. 8h.")] = None,
    proposer: Annotated[
        str, typer.Option("--proposer", help="rules | openai:MODEL | anthropic:MODEL | local:URL.")
    ] = "rules",
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue run RUN from its last checkpoint.")
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="Sandbox backend: docker or bwrap.")] = "bwrap",
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help="rules | llm:PROVIDER (e.g. llm:openai:MODEL), the LLM reviewer that may reject or "
            "escalate; default: rules with the rules proposer, else the proposer's provider.",
        ),
    ] = None,
    code_agent: Annotated[
        bool,
        typer.Option(
            "--code-agent",
            help="Code tickets get their files from the code-editing agent (needs an LLM proposer).",
        ),
    ] = False,
    concurrency: Annotated[
        str,
        typer.Option(
            "--concurrency",
            help="Tickets trained at once under the run's scheduler: auto (as many as the cores, one "
            "thread each, and the measured memory allow; on a GPU, as fit in its memory) or a "
            f"number 1..{MAX_CONCURRENCY} (on the CPU each gets its share of the cores). Default auto.",
        ),
    ] = AUTO,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Draw the run's host seeds from this seed, to reproduce a run. Default: fresh "
            "random seeds (leave it unset for a run meant to be trusted).",
        ),
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run the factory: analyse, propose, train in the sandbox, gate, judge, then milestone and report."""
    if profile not in PROFILES:
        raise UsageError(f"profile {profile!r} is not defined; known: {', '.join(PROFILES)}")
    if backend not in BACKENDS:
        raise UsageError(
            f"sandbox backend {backend!r} is not registered; known: {', '.join(sorted(BACKENDS))}"
        )
    chosen = concurrency_choice(concurrency)  # bad input fails before anything heavy loads
    from agents.run import RunRequest, start_run  # deferred: loads numba

    if proposer != "rules" and proposer.split(":", 1)[0] not in {p.split(":")[0] for p in KNOWN_PROPOSERS}:
        raise UsageError(f"proposer {proposer!r} is not registered; known: {', '.join(KNOWN_PROPOSERS)}")
    _check_key(proposer)
    if resume is None:  # a resumed run keeps the judge and code arm recorded in its run.json
        _check_judge(judge, proposer, code_agent)
    budget_s, wall_s = (
        _seconds(budget, "--budget"),
        _seconds(wall, "--wall"),
    )  # bad input fails before any set-up
    resolved = home_for(home, create=True, profile=profile)
    continue_unprivileged(resolved, backend, _progress)
    request = RunRequest(
        home=resolved,
        profile=_profile_of(resolved, profile),
        proposer=proposer,
        backend=backend,
        budget_s=budget_s,
        wall_s=wall_s,
        resume=resume,
        progress=_progress,
        judge=judge,
        code_agent=code_agent,
        concurrency=chosen,
        seed=seed,
    )
    summary = start_run(request)
    if json_out:
        emit_json(summary.as_json())
        return
    typer.echo(
        f"run {summary.run_id}: {inert(summary.stop_reason or 'finished', multiline=False)}; "
        f"{summary.tickets_run} tickets, {summary.device_seconds:.0f} device-s"
    )
    typer.echo(f"report: {summary.report_html}")


def report_cmd(
    run: Annotated[str, typer.Argument(help="Run id (a folder under <home>/runs).")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show where a run's report is and its counts (the report itself is for people)."""
    resolved = home_for(home)
    people = resolved.people_dir(run)
    source = people / "report.json"
    if not source.is_file():
        raise HomeError(
            f"run {run!r} has no report in {people}; finish it with `segfactory run --resume {run}`"
        )
    data = json.loads(source.read_text())
    summary = {
        "run_id": run,
        "report_md": str(people / "report.md"),
        "report_html": str(people / "report.html"),
        "stop_reason": data["stop_reason"],
        "counts": data["counts"],
        "proposer": data["proposer"],
        "audit_ok": (data.get("audit") or {}).get("ok"),
        "device_seconds": data["device_seconds"],
    }
    if json_out:
        emit_json(summary)
        return
    # Bytes, not read_text: its newline translation would turn a lone carriage return into a line.
    text = (people / "report.md").read_bytes().decode(errors="replace")
    typer.echo(inert(text))  # a report an older version wrote may hold raw escapes


def _queue(resolved: Any, sink: Any) -> Any:
    if not resolved.state_db.is_file():
        raise HomeError(f"no run state in {resolved.root}; start one with `segfactory run`")
    return ApprovalQueue(resolved.state_db, sink)


class _NoSink:
    """``approvals list`` writes nothing; any append would be a bug."""

    def append(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("approvals list must not write audit records")

    def put_blob(self, data: bytes) -> str:
        raise RuntimeError("approvals list must not write audit records")


@approvals_app.command("list")
def approvals_list(
    status: Annotated[str | None, typer.Option("--status", help="pending | approved | denied.")] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The data requests the proposer made and the judge's escalations, newest last."""
    resolved = home_for(home)
    queue = _queue(resolved, _NoSink())
    rows = [
        {
            "id": r.id,
            "run_id": r.run_id,
            "status": r.status,
            "hypothesis": r.ticket.hypothesis,
            "change": r.ticket.change,
            "decided_by": r.decided_by,
            "reason": r.reason,
            "kind": r.kind,
        }
        for r in queue.requests(status)
    ]
    escalations = [
        {
            "id": e.id,
            "run_id": e.run_id,
            "status": e.status,
            "kind": e.kind,
            "ticket_id": e.ticket.id,
            "hypothesis": e.ticket.hypothesis,
            "change": e.ticket.change,
            "pending": e.pending,
            "judge_reason": e.judge_reason,
            "decided_by": e.decided_by,
            "reason": e.reason,
        }
        for e in queue.escalations(status)
    ]
    if json_out:
        emit_json({"requests": rows, "escalations": escalations})
        return
    if not rows and not escalations:
        typer.echo("no data requests and no escalations")
    for row in rows:
        hypothesis = inert(row["hypothesis"][:90], multiline=False)
        typer.echo(f"{row['id']}  {row['status']:<8}  run {row['run_id']}  {hypothesis}")
    for esc in escalations:
        why = inert((esc["judge_reason"] or "")[:70], multiline=False)
        typer.echo(
            f"{esc['id']}  {esc['status']:<8}  run {esc['run_id']}  escalation: approve to "
            f"{esc['pending']} {esc['ticket_id']} ({why})"
        )


class Grant(TypedDict, total=False):
    """What approving a data request grants (``ApprovalQueue.decide``'s keywords); None: not given."""

    data: str | None  # the dataset version the ticket trains on
    count: int | None
    scope: str | None


def _decide(
    request_id: str,
    approve: bool,
    by: str,
    reason: str,
    home: Path | None,
    json_out: bool,
    grant: Grant | None = None,
) -> None:
    resolved = home_for(home)
    grant = grant or {}  # a keyword left None is decide's own default
    if data := grant.get("data"):
        resolve(resolved.root, data)  # an unknown version is refused before anything is decided
    with gate_anchor_store(resolved) as anchor, AuditLog(resolved, anchor) as log:
        decided = _queue(resolved, log).decide(request_id, approve=approve, by=by, reason=reason, **grant)
    if json_out:
        emit_json(
            {
                "id": decided.id,
                "run_id": decided.run_id,
                "status": decided.status,
                "decided_by": decided.decided_by,
                "kind": decided.kind,
                "pending": decided.pending,
            }
        )
        return
    if not approve:
        typer.echo(f"{decided.id}: {decided.status}")
    elif decided.kind == "escalation":
        typer.echo(
            f"{decided.id}: {decided.status}; run {decided.run_id} may now {decided.pending} ticket "
            f"{decided.ticket.id} when it next proposes "
            f"(`segfactory run --resume {decided.run_id}` if it stopped)"
        )
    else:
        typer.echo(
            f"{decided.id}: {decided.status}; it becomes a data ticket when run {decided.run_id} "
            f"next proposes (`segfactory run --resume {decided.run_id}`)"
        )


ByOpt = Annotated[str, typer.Option("--by", help="Who decides (recorded in the audit log).")]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why (recorded in the audit log).")]


@approvals_app.command("approve")
def approvals_approve(
    request_id: Annotated[str, typer.Argument(help="Request id (see approvals list).")],
    by: ByOpt = "operator",
    reason: ReasonOpt = "",
    home: HomeOpt = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data", help="Dataset version with the approved images (NAME/vK, from `data import`)."
        ),
    ] = None,
    count: Annotated[int | None, typer.Option("--count", min=1, help="At most this many of them.")] = None,
    scope: Annotated[
        str | None,
        typer.Option("--scope", help="Only images with a void in this slice, e.g. shape=shrinkage."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Approve a data request (it becomes a ``data`` ticket: the best's train split plus the approved
    images) or an escalation. A request approved after its run ended is taken up by the next run."""
    _decide(request_id, True, by, reason, home, json_out, {"data": data, "count": count, "scope": scope})


@approvals_app.command("deny")
def approvals_deny(
    request_id: Annotated[str, typer.Argument(help="Request id (see approvals list).")],
    by: ByOpt = "operator",
    reason: ReasonOpt = "",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Deny a data request or an escalation (recorded; nothing runs, nothing is promoted)."""
    _decide(request_id, False, by, reason, home, json_out)
