"""CLI commands for the honest controls: ``sweep``, ``aa``, ``compare``. See docs/cli.md and docs/controls.md.

Every input is checked before the home is touched (sampler, budget, search space, storage);
progress goes to stderr so that ``--json`` keeps stdout to one object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agents.run_policy import load_run_defaults
from cli._common import BackendOpt, HomeOpt, JsonOpt, check_concurrency, emit_json, home_for
from cli._drop import continue_unprivileged, rerun_as_orchestrator
from controls.aa import continuation_budget, run_aa
from controls.replay import replay
from segfactory.budgets import load_budget_policy
from segfactory.errors import UsageError
from segfactory.home import Home
from segfactory.text import inert
from segfactory.units import parse_duration

PROFILES = ("demo", "default")
AA_RUNS = (1, 500)  # --runs accepted (min, max); past it: UsageError
SAMPLERS = ("random", "tpe")  # controls.sweep.SAMPLERS
ARMS = (
    "agent",
    "agent-code",
    "sweep-tpe",
    "sweep-random",
    "nnunet",
)  # controls.compare.ARMS, kept here so bad input fails fast
BACKENDS = ("bwrap", "docker")
ProfileOpt = Annotated[
    str, typer.Option("--profile", help="Home profile when one is created: demo or default.")
]


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("sweep")(sweep_cmd)
    app.command("aa")(aa_cmd)
    app.command("compare")(compare_cmd)


def _progress(line: str) -> None:
    sys.stderr.write(inert(line, multiline=False) + "\n")  # a line can quote sandbox or model text
    sys.stderr.flush()


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except Exception as exc:
        raise UsageError(f"--budget {text!r}: {exc}") from None


def _check_common(profile: str, backend: str) -> Any:
    if profile not in PROFILES:
        raise UsageError(f"profile {profile!r} is not defined; known: {', '.join(PROFILES)}")
    if backend not in BACKENDS:
        raise UsageError(f"sandbox backend {backend!r} is not registered; known: {', '.join(BACKENDS)}")
    return load_run_defaults(profile)


def _home(home: Path | None, profile: str) -> tuple[Any, str]:
    resolved = home_for(home, create=True, profile=profile)
    return resolved, str(resolved.info().get("profile", profile))


def sweep_cmd(
    sampler: Annotated[str, typer.Option("--sampler", help="tpe or random.")] = "tpe",
    budget: Annotated[
        str, typer.Option("--budget", help="Device time for the whole sweep, e.g. 10m.")
    ] = "10m",
    seed: Annotated[int, typer.Option("--seed", help="The sampler's seed.")] = 0,
    storage: Annotated[
        str | None, typer.Option("--storage", help="Optuna storage URL (default: <home>/optuna.db).")
    ] = None,
    space: Annotated[
        Path | None, typer.Option("--space", help="Search space YAML (default: policies/search_space.yaml).")
    ] = None,
    max_trials: Annotated[
        int | None, typer.Option("--max-trials", help="Stop after this many trials, too.")
    ] = None,
    profile: ProfileOpt = "demo",
    backend: BackendOpt = "bwrap",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """An Optuna sweep at the agents' cost: same runner, sandbox, gate rule and replicate."""
    if sampler not in SAMPLERS:  # checked again by controls.sweep.check_sweep; here before any import
        raise UsageError(f"sampler {sampler!r} is not registered; known: {', '.join(SAMPLERS)}")
    budget_s = _seconds(budget)
    if max_trials is not None and max_trials < 1:
        raise UsageError(f"--max-trials {max_trials}: expected at least 1")
    from controls.arms import run_sweep_arm  # deferred: loads numba
    from controls.session import new_run_id  # deferred: loads numba

    _check_common(profile, backend)
    summary = run_sweep_arm(
        home,
        sampler=sampler,
        budget_s=budget_s,
        seed=seed,
        storage=storage,
        space_path=space,
        profile=profile,
        backend=backend,
        run_id=new_run_id(f"sweep-{sampler}-"),
        max_trials=max_trials,
        progress=_progress,
        on_home=lambda resolved: continue_unprivileged(resolved, backend, _progress),
        open_home=lambda path, asked: home_for(path, create=True, profile=asked),
    )
    if json_out:
        emit_json(summary.as_json())
        return
    typer.echo(
        f"sweep {summary.run_id}: {summary.trials} trials, {summary.device_seconds:.0f} device-s, "
        f"{summary.dev_wins} dev wins, {summary.promoted} promoted; best dev object F1 "
        f"{summary.best_dev_score} ({summary.best_ticket})"
    )


def aa_cmd(
    runs: Annotated[
        int, typer.Option("--runs", help="A/A runs (the default config, new seeds, no-op edits).")
    ] = 20,
    profile: ProfileOpt = "demo",
    backend: BackendOpt = "bwrap",
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            help="A/A runs trained at once under one scheduler (on the CPU each gets its share of "
            "the cores). Default 1.",
        ),
    ] = 1,
    continued: Annotated[
        int | None,
        typer.Option(
            "--continued",
            help="Of the runs, how many continue the reference's weights (as a budget plan's rungs "
            "and final do), against a continuation reference of their own. Default: half, rounded down.",
        ),
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A/A runs through the agents' pipeline: every win is false; reports both rules' false-win rates."""
    if not AA_RUNS[0] <= runs <= AA_RUNS[1]:
        raise UsageError(f"--runs {runs}: expected {AA_RUNS[0]}..{AA_RUNS[1]}")
    n_continued = runs // 2 if continued is None else continued
    if not 0 <= n_continued <= runs:
        raise UsageError(f"--continued {continued}: expected 0..{runs} (of the --runs)")
    _check_common(profile, backend)
    check_concurrency(concurrency)
    from controls.session import control_session, new_run_id, sandbox_runs  # deferred: loads numba

    resolved, used_profile = _home(home, profile)
    continue_unprivileged(resolved, backend, _progress)
    run_id = new_run_id("aa-")
    with control_session(
        resolved,
        backend=backend,
        profile=used_profile,
        run_id=run_id,
        kind="aa",
        progress=_progress,
        concurrency=concurrency,
    ) as s:
        before = s.spent()
        result = run_aa(
            runs,
            s.services,
            s.judge,
            run_id=run_id,
            budget=s.ticket_budget,
            make_seed=s.make_seed,
            set_reference=s.services.set_reference,
            progress=_progress,
            concurrency=concurrency,
            continued=n_continued,
            continuation_budget=continuation_budget(used_profile, s.ticket_budget),
        )
        after = s.spent()
    summary = result.summary()
    summary.concurrency = concurrency
    if summary.gate_rule.wins:  # the false-win replay of the promoted wins on the sealed tier
        summary.replay = replay(resolved, {run_id}, run_id, progress=_progress)
    summary.ledger = {t: after.get(t, 0) - before.get(t, 0) for t in ("confirm-a", "confirm-b")}
    summary.audit_sandbox_runs = sandbox_runs(resolved, run_id)
    people = resolved.people_dir(run_id)
    people.mkdir(parents=True, exist_ok=True)
    (people / "aa.json").write_text(
        json.dumps(
            {
                **summary.as_json(),
                "results": [r.model_dump(mode="json") for r in result.runs + result.continued],
            },
            indent=2,
            sort_keys=True,
        )
    )
    if json_out:
        emit_json(summary.as_json())
    else:
        g, n = summary.gate_rule, summary.naive_rule
        typer.echo(
            f"A/A {run_id}: {summary.runs} runs; gate rule (with replicate) {g.wins}/{g.runs} false "
            f"wins; naive best-dev rule {n.wins}/{n.runs}; ledger {summary.ledger}; people: {people}"
        )
    _refuse_failed_runs(summary, result.runs + result.continued)


def _refuse_failed_runs(summary: Any, runs: list[Any]) -> None:
    """An A/A whose runs failed measured less than it was asked to: exit 1 and say so (the
    summary, printed and kept in ``aa.json``, counts only the runs that reached a decision)."""
    lost = summary.failed + summary.undecided
    if not lost:
        return
    first = next((r.reason for r in runs if r.status == "failed" or r.replicate_status == "failed"), "")
    sys.stderr.write(
        f"segfactory: error: {lost} of {summary.runs} A/A runs did not reach a decision "
        f"(first: {inert(first[:200], multiline=False)}); the rates count the "
        f"{summary.gate_rule.runs} that did\n"
    )
    raise typer.Exit(1)


def compare_cmd(
    arms: Annotated[
        str,
        typer.Option("--arms", help="Comma-separated: agent, agent-code, sweep-tpe, sweep-random, nnunet."),
    ] = "agent,sweep-tpe,sweep-random",
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds per arm (at least 3 for a claim).")] = 3,
    budget: Annotated[str, typer.Option("--budget", help="Device time per arm and seed, e.g. 8m.")] = "8m",
    proposer: Annotated[str, typer.Option("--proposer", help="The agent arm's proposer.")] = "rules",
    profile: ProfileOpt = "demo",
    backend: BackendOpt = "bwrap",
    first_seed: Annotated[
        int,
        typer.Option(
            "--first-seed",
            help="The first seed (then first+1, ...): run seeds one comparison at a time, then --combine.",
        ),
    ] = 0,
    combine: Annotated[
        str | None,
        typer.Option(
            "--combine",
            help="Comma-separated compare ids of this home: summarise their seeds as one comparison "
            "(nothing trains; the other options are not used).",
        ),
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Equal device-seconds per arm over seeds, each arm from the same incumbent; arms ranked by sealed
    worst-slice recall (object F1 beside it) with paired differences; a best-so-far plot."""
    if combine is not None:
        _combine(combine, home, json_out)
        return
    if first_seed < 0:
        raise UsageError(f"--first-seed {first_seed}: expected 0 or more")
    wanted = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in wanted if a not in ARMS]
    if unknown or not wanted:
        raise UsageError(
            f"--arms {arms!r}: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(ARMS)}"
        )
    if "agent-code" in wanted and proposer == "rules":
        raise UsageError(
            "--arms agent-code needs an LLM --proposer (openai:MODEL, anthropic:MODEL or local:URL): "
            "its code-editing agent uses the proposer's provider"
        )
    if seeds < 1:
        raise UsageError(f"--seeds {seeds}: expected at least 1")
    budget_s = _seconds(budget)
    defaults = _check_common(profile, backend)
    if budget_s < defaults.ticket.device_seconds:
        raise UsageError(
            f"--budget {budget}: too small for one ticket ({defaults.ticket.device_seconds:g} device-s)"
        )
    if {"agent", "agent-code"} & set(wanted):  # the agent arm is a run: refused here, before any arm starts
        cap = load_budget_policy().for_profile(profile).arm_caps().device_seconds
        if budget_s > cap:
            raise UsageError(
                f"--budget {budget}: {budget_s:g} device-s is above the {profile} compare_arm cap "
                f"{cap:g} for an agent arm in policies/budgets.yaml; ask for less or raise the cap there"
            )
    from controls.compare import run_compare  # deferred: loads numba

    resolved, _ = _home(home, profile)
    continue_unprivileged(resolved, backend, _progress)
    summary = run_compare(
        resolved.root,
        arms=wanted,
        seeds=seeds,
        budget_s=budget_s,
        proposer=proposer,
        profile=profile,
        backend=backend,
        progress=_progress,
        first_seed=first_seed,
    )
    _print_compare(summary, json_out)


def _combine(ids: str, home: Path | None, json_out: bool) -> None:
    """``compare --combine``: the named comparisons of an existing home summarised as one."""
    from controls.compare_combine import combine  # deferred: loads matplotlib's plotting

    resolved = Home.resolve(home)
    if not resolved.exists():
        raise UsageError(f"--combine: no home at {resolved.root}")
    dropped = rerun_as_orchestrator(resolved)  # as root: the files are written as `segfactory`
    if dropped is not None:
        raise typer.Exit(dropped)
    summary = combine(resolved, [i.strip() for i in ids.split(",") if i.strip()])
    _print_compare(summary, json_out)


def _print_compare(summary: Any, json_out: bool) -> None:
    if json_out:
        emit_json(summary.as_json())
        return
    typer.echo(summary.verdict)
    typer.echo(f"report: {summary.report}; plot: {summary.plot}")
