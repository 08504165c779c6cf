"""The comparison's summary (plain words on who won), its ranking and its best-so-far plot (people only).

The ranking follows the plan's metric: the sealed worst-slice robustness score as the win rule
defines "robust" (object recall on the worst size slice with at least ``min_support`` voids),
read per arm and seed from the gate's sealed milestone, with sealed object F1 beside it. Seeds
are the unit of replication: each arm's mean over seeds carries a t interval, and every pair of
arms a paired (seed by seed) difference with its t interval, for both metrics. When the gate's
milestone does not report the worst-slice score, the ranking says so and falls back to sealed
object F1 rather than inventing one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_serializer

from agents.llm import LLMUsage
from controls.rates import Yield
from controls.replay import Replay
from segfactory import stats
from segfactory.records import Result

TIE_TOLERANCE = 0.005  # object F1 points: mean sealed scores closer than this are a tie
DIFF_CONFIDENCE = 0.90  # two-sided confidence of the paired (sweep - agent) interval across seeds


class SealedScores(BaseModel):
    """One arm-run's best model on the sealed tier, as the gate's milestone reported it."""

    model_config = ConfigDict(extra="forbid")

    object_f1: dict[str, float]  # estimate, low, high, alpha (``segfactory.stats.Interval``)
    worst_slice_recall: float | None = None  # None: the milestone gave no worst-slice score
    slice_recall: dict[str, float] | None = None
    slice_voids: dict[str, int] | None = None  # voids behind each slice's recall


class ArmRun(BaseModel):
    """What one arm did on one seed: its best-so-far curve, its counts and its sealed scores.

    ``compare.json`` keeps only the fields an arm-run set (``model_dump(exclude_unset=True)``),
    so each arm's rows keep the shape they always had (only nnU-Net's carry ``plan``).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str = ""
    seed: int | None = None  # the comparison's seed; None in reports written before seeds were kept
    curve: list[tuple[float, float]] = Field(default_factory=list)  # (device-seconds, best dev so far)
    best_ticket: str | None = None
    # the run's LLM totals as its llm_usage.json holds them ({}: a sweep's, or nnU-Net's)
    llm: LLMUsage = Field(default_factory=LLMUsage)
    promoted: int = 0
    dev_wins: int = 0
    confirm_a_wins: int = 0
    plan: dict[str, JsonValue] | None = None  # nnU-Net's own plan (patch, batch, stages, epochs)
    replicate_plan: dict[str, JsonValue] | None = None
    start_best: str | None = None  # the incumbent it started from
    restored_before: bool | None = None  # whether the best had to be moved back first
    fresh_tiers: dict[str, int] = Field(default_factory=dict)  # tiers redrawn for it: {tier: version}
    sealed: SealedScores | None = None


Results = Mapping[str, list[ArmRun]]  # arm -> its runs, seed by seed
Metric = Literal["worst_slice_recall", "object_f1"]


class Spread(Result):
    """A mean across seeds with its two-sided t interval (bounds None below two values)."""

    n: int
    mean: float | None
    confidence: float
    low: float | None
    high: float | None


class SeedDiffs(Spread):
    """``a - b`` seed by seed (only seeds where both arms have a sealed score), and their spread."""

    per_seed: list[float]


class Ranking(Result):
    """Arms best first on ``metric``, with each arm's spread and per-seed scores on both metrics."""

    metric: Metric
    order: list[str]
    note: str | None  # why the ranking fell back to object F1, if it did
    per_arm: dict[str, dict[str, Spread]]
    per_seed: dict[str, dict[str, list[float | None]]]


class SweepMinusAgent(Result):
    """The best sweep arm minus the agent arm, seed by seed, with a t interval across seeds."""

    arm: str
    per_seed: list[float]
    confidence: float
    mean: float | None
    low: float | None
    high: float | None


class ArmSummary(Result):
    """One arm over all seeds: sealed scores, counts, device time and yield."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    seeds: int
    sealed_object_f1: list[SealedScores | None]
    mean_sealed_object_f1: float | None
    best_dev_so_far: list[float | None]
    dev_wins: int
    confirm_a_wins: int
    promoted: int
    sealed_worst_slice_recall: list[float | None]
    device_seconds: list[float]
    start_best: list[str | None]
    fresh_tiers: list[dict[str, int]]
    plans: list[dict[str, JsonValue]]  # nnU-Net's own plans, as it wrote them
    yield_: dict[str, float | int | None] = Field(alias="yield")  # controls.rates.Yield.as_dict


class CompareSummary(Result):
    """``compare --json`` and ``compare.json``'s ``summary``. The keys from ``replay`` on are added
    by ``controls.compare.run_compare`` (or ``combine``) once the replay, the plot and the report
    exist."""

    arms: dict[str, ArmSummary]
    seeds: int
    budget_s_per_arm_and_seed: float
    proposer: str
    sweep_minus_agent: SweepMinusAgent | None
    verdict: str
    ranking: Ranking
    paired_differences: dict[str, dict[str, SeedDiffs]]  # "a - b" -> metric -> differences
    ranking_text: str
    replay: dict[str, Replay] | None = None
    compare_id: str | None = None
    plot: str | None = None
    report: str | None = None
    incumbent: str | None = None  # sha256 of the best every arm started from
    first_seed: int | None = None  # the first seed this comparison ran (``--first-seed``)
    combined_from: list[str] | None = None  # ``compare --combine``: the comparisons whose seeds these are
    source: str | None = None  # the code it ran (``segfactory.source``); None: written before it was kept
    sources: dict[str, str | None] | None = None  # ``--combine``: each combined comparison's ``source``

    @field_serializer("replay")
    def _whole_replays(self, replay: dict[str, Replay] | None) -> dict[str, object] | None:
        return None if replay is None else {a: r.model_dump(mode="json") for a, r in replay.items()}


def _sealed_f1(run: ArmRun) -> float | None:
    return float(run.sealed.object_f1["estimate"]) if run.sealed is not None else None


def _sealed_worst(run: ArmRun) -> float | None:
    return run.sealed.worst_slice_recall if run.sealed is not None else None


METRICS = {
    "worst_slice_recall": _sealed_worst,
    "object_f1": _sealed_f1,
}  # rank order: first, then the tie-break


def t_interval(values: list[float]) -> Spread:
    """Mean with a two-sided ``DIFF_CONFIDENCE`` t interval across seeds; bounds None below two values."""
    found = stats.t_interval(values, DIFF_CONFIDENCE)
    return Spread(
        n=len(values),
        mean=sum(values) / len(values) if values else None,
        confidence=DIFF_CONFIDENCE,
        low=None if found is None else found.low,
        high=None if found is None else found.high,
    )


def _per_seed(runs: list[ArmRun], metric: str) -> list[float | None]:
    return [METRICS[metric](r) for r in runs]


def pairwise_differences(results: Results) -> dict[str, dict[str, SeedDiffs]]:
    """``"a - b"`` for every pair of arms (in the order given), per metric: per-seed differences and a
    t interval.

    Only seeds where both arms have a sealed score count; a seed is paired with the same seed.
    """
    arms, out = list(results), {}
    for i, a in enumerate(arms):
        for b in arms[i + 1 :]:
            pair: dict[str, SeedDiffs] = {}
            for metric in METRICS:
                diffs = [
                    x - y
                    for x, y in zip(
                        _per_seed(results[a], metric), _per_seed(results[b], metric), strict=False
                    )
                    if x is not None and y is not None
                ]
                pair[metric] = SeedDiffs(per_seed=diffs, **t_interval(diffs).as_json())
            out[f"{a} - {b}"] = pair
    return out


def ranking(results: Results) -> Ranking:
    """Arms best first by mean sealed worst-slice score (object F1 breaks ties), or by object F1 when
    the milestone reported no worst-slice score for any arm."""
    means = {
        arm: {m: t_interval([v for v in _per_seed(runs, m) if v is not None]) for m in METRICS}
        for arm, runs in results.items()
    }
    have_worst = any(means[a]["worst_slice_recall"].n for a in means)
    metric: Metric = "worst_slice_recall" if have_worst else "object_f1"

    def key(arm: str) -> tuple[float, float]:
        first, second = means[arm][metric].mean, means[arm]["object_f1"].mean
        return (
            first if first is not None else float("-inf"),
            second if second is not None else float("-inf"),
        )

    order = sorted(means, key=key, reverse=True)
    note = (
        None
        if have_worst
        else (
            "the gate's sealed milestone reported no worst-slice score, so the arms are "
            "ranked by sealed object F1"
        )
    )
    return Ranking(
        metric=metric,
        order=order,
        note=note,
        per_arm=means,
        per_seed={arm: {m: _per_seed(runs, m) for m in METRICS} for arm, runs in results.items()},
    )


def _arm_summary(runs: list[ArmRun]) -> ArmSummary:
    scores = [s for s in (_sealed_f1(r) for r in runs) if s is not None]
    seconds = [r.curve[-1][0] if r.curve else 0.0 for r in runs]
    tokens = sum(r.llm.input_tokens + r.llm.output_tokens for r in runs)
    llm_s = sum(r.llm.latency_s for r in runs)  # LLM time, apart from device time
    return ArmSummary(
        seeds=len(runs),
        sealed_object_f1=[r.sealed for r in runs],
        mean_sealed_object_f1=sum(scores) / len(scores) if scores else None,
        best_dev_so_far=[r.curve[-1][1] if r.curve else None for r in runs],
        dev_wins=sum(r.dev_wins for r in runs),
        confirm_a_wins=sum(r.confirm_a_wins for r in runs),
        promoted=sum(r.promoted for r in runs),
        sealed_worst_slice_recall=[_sealed_worst(r) for r in runs],
        device_seconds=seconds,
        start_best=[r.start_best for r in runs],
        fresh_tiers=[r.fresh_tiers for r in runs],
        plans=[r.plan for r in runs if r.plan],
        yield_=Yield(
            promoted=sum(r.promoted for r in runs),
            device_seconds=sum(seconds),
            llm_tokens=tokens,
            llm_seconds=llm_s,
        ).as_dict(),
    )


def paired_difference(arms: dict[str, ArmSummary]) -> SweepMinusAgent | None:
    """The best sweep arm minus the agent arm, seed by seed, with a t interval across seeds.

    Seeds are the unit of replication: one arm-run's sealed interval says nothing about how far
    another seed would land, so the verdict rests on this interval, not on the mean scores alone.
    None when the agent arm or every sweep arm lacks sealed scores.
    """
    agent = arms["agent"].mean_sealed_object_f1 if "agent" in arms else None
    sweeps = {
        a: s.mean_sealed_object_f1
        for a, s in arms.items()
        if a.startswith("sweep") and s.mean_sealed_object_f1 is not None
    }
    if agent is None or not sweeps:
        return None
    arm = max(sweeps, key=lambda a: sweeps[a] or 0.0)
    pairs = zip(arms[arm].sealed_object_f1, arms["agent"].sealed_object_f1, strict=False)
    per_seed = [float(s.object_f1["estimate"]) - float(a.object_f1["estimate"]) for s, a in pairs if s and a]
    spread = t_interval(per_seed)
    return SweepMinusAgent(
        arm=arm,
        per_seed=per_seed,
        confidence=DIFF_CONFIDENCE,
        mean=spread.mean,
        low=spread.low,
        high=spread.high,
    )


def ranking_text(rank: Ranking, pairs: dict[str, dict[str, SeedDiffs]]) -> str:
    """The ranking in one sentence, with the top two arms' paired difference on the ranking metric."""
    order, metric = rank.order, rank.metric
    if not order:
        return ""
    words = "sealed worst-slice recall" if metric == "worst_slice_recall" else "sealed object F1"
    shown = ", ".join(
        f"{a} {m:.3f}" if (m := rank.per_arm[a][metric].mean) is not None else f"{a} -" for a in order
    )
    text = f"Ranked by mean {words}: {shown}."
    if len(order) >= 2:
        pair = pairs.get(f"{order[0]} - {order[1]}") or pairs.get(f"{order[1]} - {order[0]}")
        if pair is not None:
            d = pair[metric]
            sign = 1 if f"{order[0]} - {order[1]}" in pairs else -1
            if d.low is not None and d.high is not None and d.mean is not None:
                lo, hi = sorted((sign * d.low, sign * d.high))
                text += (
                    f" {order[0]} minus {order[1]}: {sign * d.mean:+.3f}, "
                    f"{round(100 * DIFF_CONFIDENCE)}% interval [{lo:+.3f}, {hi:+.3f}] over {d.n} seeds."
                )
            elif d.mean is not None:
                text += f" {order[0]} minus {order[1]}: {sign * d.mean:+.3f} on one seed (no interval)."
    return text + (f" Note: {rank.note}." if rank.note else "")


def verdict_text(arms: dict[str, ArmSummary], proposer: str) -> str:
    """One plain paragraph: does the sweep tie or win, how sure that is, and what the agent arm was."""
    diff = paired_difference(arms)
    parts = []
    if diff is None:
        parts.append("Not enough sealed scores to compare the agent arm with the sweep.")
    else:
        arm, agent = diff.arm, arms["agent"].mean_sealed_object_f1 or 0.0
        best = arms[arm].mean_sealed_object_f1 or 0.0
        scores = f"{arm} {best:.3f} against the agent arm's {agent:.3f} (mean sealed object F1)"
        if diff.low is None or diff.high is None or diff.mean is None:  # one seed: spread not measured
            word = (
                "wins"
                if best > agent + TIE_TOLERANCE
                else "ties"
                if best >= agent - TIE_TOLERANCE
                else "loses"
            )
            parts.append(
                f"The sweep {word}: {scores}, on one seed only: the spread between seeds is not "
                "measured, so this is not a resolved difference."
            )
        else:
            interval = (
                f"paired difference {diff.mean:+.3f}, {round(100 * DIFF_CONFIDENCE)}% interval "
                f"[{diff.low:+.3f}, {diff.high:+.3f}] over {len(diff.per_seed)} seeds"
            )
            if diff.low > 0 and diff.mean > TIE_TOLERANCE:
                parts.append(f"The sweep wins: {scores}; {interval}.")
            elif diff.high < 0 and diff.mean < -TIE_TOLERANCE:
                parts.append(f"The agent arm wins: {scores}; {interval}.")
            else:
                parts.append(f"The sweep ties: {scores}; {interval} contains no resolved difference.")
    if proposer == "rules":
        parts.append("No LLM was configured: the agent arm was the rules proposer.")
    return " ".join(parts)


def summarise(results: Results, *, proposer: str, budget_s: float, seeds: int) -> CompareSummary:
    arms = {arm: _arm_summary(runs) for arm, runs in results.items()}
    rank, pairs = ranking(results), pairwise_differences(results)
    return CompareSummary(
        arms=arms,
        seeds=seeds,
        budget_s_per_arm_and_seed=budget_s,
        proposer=proposer,
        sweep_minus_agent=paired_difference(arms),
        verdict=" ".join(filter(None, (verdict_text(arms, proposer), ranking_text(rank, pairs)))),
        ranking=rank,
        paired_differences=pairs,
        ranking_text=ranking_text(rank, pairs),
    )


def write_plot(results: Results, path: Path) -> Path:
    """Best-so-far dev object F1 against device-seconds, one colour per arm, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for colour, (arm, runs) in zip(("C0", "C1", "C2", "C3"), results.items(), strict=False):
        for i, run in enumerate(runs):
            if run.curve:
                xs, ys = zip(*run.curve, strict=True)
                ax.step(xs, ys, where="post", color=colour, alpha=0.8, label=arm if i == 0 else None)
    ax.set_xlabel("device-seconds")
    ax.set_ylabel("best dev object F1 so far")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = [
    "ArmRun",
    "ArmSummary",
    "CompareSummary",
    "Ranking",
    "Results",
    "SealedScores",
    "SeedDiffs",
    "Spread",
    "SweepMinusAgent",
    "pairwise_differences",
    "paired_difference",
    "ranking",
    "summarise",
    "t_interval",
    "verdict_text",
    "write_plot",
]
