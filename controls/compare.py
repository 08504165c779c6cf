"""``segfactory compare``: agents against the sweep and nnU-Net at equal device-seconds, over seeds.

For each seed, each arm gets the same device-second budget: ``agent`` is a ``segfactory run``
(``agents.run.start_run``), ``sweep-tpe`` / ``sweep-random`` a sweep with that sampler seed,
``nnunet`` one nnU-Net run (``controls.nnunet_arm``). Every arm-run starts from the incumbent
the comparison started from (``controls.isolation``): one arm's promotions never move another
arm's bar, and no arm's queries spend another's budget (each arm-run meets confirm tiers nobody
else has queried, with their full budgets). Each arm's best model on
dev is then scored once on the sealed tier (never-queried is left alone) through one gate
milestone per seed, within the sealed quota: when the quota is spent the sealed tier is rotated
to fresh secret seeds first (recorded by the gate). The report ranks the arms by the sealed
worst-slice score (``controls.compare_report``); it and a best-so-far plot go to
``runs/<compare id>/people/`` (people only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agents.run import RunRequest, start_run
from controls.arms import existing_home, run_sweep_arm
from controls.compare_report import ArmRun, CompareSummary, SealedScores, summarise, write_plot
from controls.isolation import BestStore, GateBestStore, Incumbent, start_from
from controls.nnunet_arm import NnunetArmSummary, run_nnunet_arm
from controls.replay import replay, sealed_milestone, sealed_score
from controls.session import new_run_id
from gate.milestone_report import MilestoneReport
from segfactory.files import read_jsonl, write_atomic
from segfactory.home import Home
from segfactory.layout import RunsLayout
from segfactory.source import source_digest

ARMS = (
    "agent",
    "agent-code",
    "sweep-tpe",
    "sweep-random",
    "nnunet",
)  # the CLI keeps a copy to refuse bad input fast
PLOT_FILE = "best_so_far.png"


def _curve(rows: list[tuple[float, float | None]]) -> list[tuple[float, float]]:
    """(device-seconds spent, dev score or None for a failure) in run order -> best-so-far
    against cumulative seconds; a failed ticket's seconds count, its score does not."""
    out, spent, best = [], 0.0, float("-inf")
    for seconds, score in rows:
        spent += seconds
        best = best if score is None else max(best, score)
        if best > float("-inf"):
            out.append((spent, best))
    return out


def _agent_arm(home: Home, run_id: str) -> ArmRun:
    """The agent run's per-ticket dev scores, device-seconds, best ticket and LLM usage."""
    tickets, people = home.tickets_dir(run_id), home.people_dir(run_id)
    scores = {r["ticket_id"]: float(r["object_f1"]) for r in read_jsonl(people / "dev_comparisons.jsonl")}
    started = [t["id"] for t in read_jsonl(people / "tickets.jsonl")] or list(scores)
    rows: list[tuple[float, float | None]] = []
    for ticket_id in started:  # every ticket in run order, failures and replicates included
        outcome = tickets / ticket_id / "outcome.json"
        seconds = json.loads(outcome.read_text())["device_seconds"] if outcome.is_file() else 0.0
        rows.append((float(seconds), scores.get(ticket_id)))
    best = max(scores.items(), key=lambda kv: kv[1]) if scores else None
    usage_file = home.runs / run_id / "llm_usage.json"
    usage = json.loads(usage_file.read_text()) if usage_file.is_file() else {}
    report = home.people_dir(run_id) / "report.json"
    counts = json.loads(report.read_text()).get("counts", {}) if report.is_file() else {}
    return ArmRun(
        run_id=run_id,
        curve=_curve(rows),
        best_ticket=best[0] if best else None,
        llm=usage,
        promoted=_promoted(home, run_id),
        dev_wins=counts.get("dev_wins", 0),
        confirm_a_wins=counts.get("survived_confirm_a", 0),
    )


def _sweep_arm(home: Home, run_id: str) -> ArmRun:
    trials = read_jsonl(home.people_dir(run_id) / "sweep.jsonl")
    rows = [(float(t["device_seconds"]), t["dev_score"]) for t in trials]
    scored = [t for t in trials if t["dev_score"] is not None]
    best = max(scored, key=lambda t: t["dev_score"])["ticket_id"] if scored else None
    return ArmRun(
        run_id=run_id,
        curve=_curve(rows),
        best_ticket=best,
        llm={},
        promoted=sum(t["decision"] == "promote" for t in trials),
        dev_wins=sum(t["status"] == "dev_win" for t in trials),
        confirm_a_wins=sum(t["confirm_a"] == "WIN" for t in trials),
    )


def _nnunet_arm(home: Home, summary: NnunetArmSummary) -> ArmRun:
    """The nnU-Net arm in the shape of the others: its ticket (and replicate) on the curve, its plan."""
    candidate, tickets = summary.candidate, home.tickets_dir(summary.run_id)
    rows: list[tuple[float, float | None]] = []
    for ticket_id, score in (
        (candidate.ticket_id, candidate.dev_score),
        (candidate.replicate_id, None),
    ):
        outcome = tickets / str(ticket_id) / "outcome.json"
        if ticket_id and outcome.is_file():
            rows.append((float(json.loads(outcome.read_text())["device_seconds"]), score))
    return ArmRun(
        run_id=summary.run_id,
        curve=_curve(rows),
        llm={},
        best_ticket=candidate.ticket_id if candidate.dev_score is not None else None,
        promoted=int(candidate.decision == "promote"),
        dev_wins=int(candidate.status == "dev_win"),
        confirm_a_wins=int(candidate.confirm_a == "WIN"),
        plan=summary.plan,
        replicate_plan=summary.replicate_plan,
    )


def _promoted(home: Home, run_id: str) -> int:
    return sum(p.run_id == run_id for p in RunsLayout(home).promotions())


def _run_arm(
    home_path: Path | None,
    arm: str,
    seed: int,
    budget_s: float,
    proposer: str,
    profile: str,
    backend: str,
    progress: Callable[[str], None],
) -> ArmRun:
    home = Home.resolve(home_path)
    if arm in ("agent", "agent-code"):  # agent-code: the same run, its code tickets written by the code agent
        # The arm stops by the sweeps' rule (only its budget: device time, or the profile's
        # compare_arm wall and ticket caps), so equal budgets mean equal device time spent.
        summary = start_run(
            RunRequest(
                home=home,
                profile=profile,
                proposer=proposer,
                backend=backend,
                budget_s=budget_s,
                progress=progress,
                code_agent=arm == "agent-code",
                fill_budget=True,
            )
        )
        return _agent_arm(home, summary.run_id)
    if arm == "nnunet":
        nnunet = run_nnunet_arm(
            home_path,
            budget_s=budget_s,
            profile=profile,
            backend=backend,
            run_id=new_run_id(f"nnunet-s{seed}-"),
            progress=progress,
        )
        return _nnunet_arm(home, nnunet)
    sampler = arm.removeprefix("sweep-")
    sweep = run_sweep_arm(
        home_path,
        sampler=sampler,
        budget_s=budget_s,
        seed=seed,
        storage=None,
        space_path=None,
        profile=profile,
        backend=backend,
        run_id=new_run_id(f"sweep-{sampler}-s{seed}-"),
        progress=progress,
    )
    return _sweep_arm(home, sweep.run_id)


ArmRunner = Callable[[str, int], ArmRun]  # (arm, seed) -> what the arm-run did


def run_arms(
    arms: list[str],
    seeds: int,
    run_arm: ArmRunner,
    store: BestStore,
    after_seed: Callable[[int, dict[str, list[ArmRun]]], None] = lambda seed, results: None,
    first_seed: int = 0,
) -> tuple[Incumbent, dict[str, list[ArmRun]]]:
    """Every arm-run from the same incumbent (restored when an earlier arm-run moved the best),
    for seeds ``first_seed`` .. ``first_seed + seeds - 1``.

    Each result records its ``seed``, ``start_best`` (the incumbent it started from),
    ``restored_before`` (whether the best had to be moved back first) and ``fresh_tiers`` (the
    queried tiers redrawn for it because an earlier arm-run had queried them, with their new
    versions); the incumbent is restored after the last run.
    """
    incumbent = store.current()
    results: dict[str, list[ArmRun]] = {arm: [] for arm in arms}
    for seed in range(first_seed, first_seed + seeds):
        for arm in arms:
            restored = start_from(store, incumbent, f"{arm} seed {seed}")
            fresh = store.fresh_tiers()
            result = run_arm(arm, seed).model_copy(
                update={
                    "seed": seed,
                    "start_best": incumbent.sha256,
                    "restored_before": restored,
                    "fresh_tiers": fresh,
                }
            )
            results[arm].append(result)
        after_seed(seed, results)
    start_from(store, incumbent, "the end of the comparison")
    return incumbent, results


def run_compare(
    home_path: Path | None,
    *,
    arms: list[str],
    seeds: int,
    budget_s: float,
    proposer: str,
    profile: str,
    backend: str,
    progress: Callable[[str], None],
    first_seed: int = 0,
) -> CompareSummary:
    home = existing_home(home_path, profile)
    compare_id = new_run_id("compare-")
    people = home.people_dir(compare_id)
    people.mkdir(parents=True, exist_ok=True)

    def run_arm(arm: str, seed: int) -> ArmRun:
        progress(f"compare {compare_id}: seed {seed}, arm {arm}, {budget_s:g} device-s")
        return _run_arm(home_path, arm, seed, budget_s, proposer, profile, backend, progress)

    def after_seed(seed: int, results: dict[str, list[ArmRun]]) -> None:
        models = {
            arm: home.tickets_dir(r[-1].run_id) / str(r[-1].best_ticket) / "model.onnx"
            for arm, r in results.items()
            if r[-1].best_ticket
        }
        report = sealed_milestone(
            home, f"{compare_id}-seed{seed}", compare_id, list(models.values()), progress
        )
        for arm, model in models.items():
            results[arm][-1].sealed = _sealed_scores(report, model)
        so_far = json.dumps(_dump(results), indent=2, sort_keys=True, default=str)
        write_atomic(people / "compare.json", so_far)

    incumbent, results = run_arms(
        arms, seeds, run_arm, GateBestStore(home, compare_id), after_seed, first_seed
    )
    summary = summarise(results, proposer=proposer, budget_s=budget_s, seeds=seeds).model_copy(
        update={
            "first_seed": first_seed,
            "replay": {
                arm: replay(home, {r.run_id for r in runs}, f"{compare_id}-{arm}", progress=progress)
                for arm, runs in results.items()
            },
            "compare_id": compare_id,
            "plot": str(write_plot(results, people / PLOT_FILE)),
            "report": str(people / "compare.json"),
            "incumbent": incumbent.sha256,
            "source": source_digest(),
        }
    )
    write_atomic(
        people / "compare.json",
        json.dumps(
            {"summary": summary.as_json(), "arms": _dump(results)}, indent=2, sort_keys=True, default=str
        ),
    )
    return summary


def _dump(results: dict[str, list[ArmRun]]) -> dict[str, list[dict[str, object]]]:
    """``compare.json``'s arms: each arm-run with the fields it set, as they were always written."""

    def as_written(run: ArmRun) -> dict[str, object]:
        return run.model_dump(mode="json", exclude_unset=True)

    return {arm: [as_written(r) for r in rows] for arm, rows in results.items()}


def _sealed_scores(report: MilestoneReport, model: Path) -> SealedScores | None:
    """Sealed object F1 (with its interval) and, where the milestone gives it, the worst-slice score."""

    score = sealed_score(report, model)
    if score is None:
        return None
    return SealedScores(
        object_f1=score.object_f1.as_dict(),
        worst_slice_recall=score.worst_slice_recall,
        slice_recall=score.slice_recall,
        slice_voids=score.slice_voids,  # milestones from pinned code of 2026-12-02 on
    )


__all__ = ["ARMS", "run_arms", "run_compare"]
