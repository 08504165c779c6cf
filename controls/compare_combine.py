"""``segfactory compare --combine``: comparisons run a seed at a time, summarised as one.

A comparison over three seeds at 25 device-minutes per arm takes hours on a small machine. It
can be run as three comparisons of one seed each (``compare --seeds 1 --first-seed K``, on
different days if need be) and combined afterwards. ``combine`` reads each one's
``runs/<id>/people/compare.json`` and summarises their arm-runs together, as one comparison over
all their seeds would have: the same ranking, paired differences seed by seed, verdict and plot
(``controls.compare_report``), and the false-win replays concatenated. Nothing trains and nothing
is scored: each sealed score is the one its own comparison's milestone reported.

It refuses what would not be one comparison: a comparison that has not finished, different arms,
budgets or proposers, a different incumbent to start from (the home's best moved between them),
or a seed that appears twice. Seeds run on different code (``segfactory.source``) are combined,
and the verdict says so, naming each comparison's source digest: a reader weighs that.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, ValidationError

from controls.compare_report import ArmRun, CompareSummary, summarise, write_plot
from controls.rates import RateRecord, false_win_rate
from controls.replay import Replay
from controls.session import new_run_id
from segfactory.errors import UsageError
from segfactory.files import write_atomic
from segfactory.home import Home

COMPARE_FILE = "compare.json"
PLOT_FILE = "best_so_far.png"


class _Source(BaseModel):
    """What ``combine`` reads of one finished comparison's ``compare.json``."""

    model_config = ConfigDict(extra="ignore")

    summary: dict[str, object]
    arms: dict[str, list[ArmRun]]


def read_compare(home: Home, compare_id: str) -> tuple[CompareSummary, dict[str, list[ArmRun]]]:
    """One finished comparison's summary and arm-runs, each arm-run with its seed; UsageError
    when the home has no finished comparison of that id."""
    path = home.people_dir(compare_id) / COMPARE_FILE
    if not path.is_file():
        raise UsageError(f"--combine: no comparison {compare_id!r} in {home.root} (no {path})")
    try:
        source = _Source.model_validate_json(path.read_text())
        summary = CompareSummary.model_validate(source.summary)
    except ValidationError as exc:
        raise UsageError(
            f"--combine: {path} is not a finished comparison's report ({exc.errors()[0]['msg']}); "
            "a comparison still running, or stopped, has no summary yet"
        ) from None
    first = summary.first_seed or 0
    arms = {  # rows written before seeds were kept: the comparison ran its seeds in order
        arm: [
            r if r.seed is not None else r.model_copy(update={"seed": first + i}) for i, r in enumerate(runs)
        ]
        for arm, runs in source.arms.items()
    }
    return summary, arms


def combine(home: Home, compare_ids: list[str]) -> CompareSummary:
    """The comparisons ``compare_ids`` of ``home`` as one, written to a new comparison's people
    folder (``compare.json`` with ``combined_from``, and its plot); its summary."""
    if len(compare_ids) < 2 or len(set(compare_ids)) != len(compare_ids):
        raise UsageError(f"--combine {','.join(compare_ids)}: name two or more different comparisons")
    read = [(cid, *read_compare(home, cid)) for cid in compare_ids]
    _same(read)
    merged: dict[str, list[ArmRun]] = {arm: [] for arm in read[0][2]}
    seen: dict[int, str] = {}
    for cid, _, arms in read:
        for seed in _seeds(cid, arms):
            if seed in seen:
                raise UsageError(
                    f"--combine: seed {seed} is in both {seen[seed]} and {cid}; run later seeds with "
                    "--first-seed so that each comparison has seeds of its own"
                )
            seen[seed] = cid
        for arm, rows in arms.items():
            merged[arm].extend(rows)
    for rows in merged.values():
        rows.sort(key=lambda r: r.seed or 0)
    first = read[0][1]
    sources = {cid: s.source for cid, s, _ in read}
    compare_id = new_run_id("compare-combined-")
    people = home.people_dir(compare_id)
    people.mkdir(parents=True, exist_ok=True)
    summary = summarise(
        merged, proposer=first.proposer, budget_s=first.budget_s_per_arm_and_seed, seeds=len(seen)
    )
    summary = summary.model_copy(
        update={
            "verdict": summary.verdict + _code_caveat(sources),
            "sources": sources,
            "replay": _replays([s for _, s, _ in read]),
            "compare_id": compare_id,
            "plot": str(write_plot(merged, people / PLOT_FILE)),
            "report": str(people / COMPARE_FILE),
            "incumbent": first.incumbent,
            "first_seed": min(seen),
            "combined_from": compare_ids,
        }
    )
    arms_json = {
        arm: [r.model_dump(mode="json", exclude_unset=True) for r in runs] for arm, runs in merged.items()
    }
    write_atomic(
        people / COMPARE_FILE,
        json.dumps({"summary": summary.as_json(), "arms": arms_json}, indent=2, sort_keys=True, default=str),
    )
    return summary


def _code_caveat(sources: dict[str, str | None]) -> str:
    """A sentence for the verdict when the combined seeds did not all run on one known code."""
    if len(set(sources.values())) == 1 and None not in sources.values():
        return ""
    named = ", ".join(f"{cid}: {code[:19] if code else 'not recorded'}" for cid, code in sources.items())
    return f" The combined comparisons did not all run on the same recorded code ({named})."


def _same(read: list[tuple[str, CompareSummary, dict[str, list[ArmRun]]]]) -> None:
    """Refuse comparisons that differ in what makes their seeds one comparison."""
    cid0, s0, arms0 = read[0]
    for cid, s, arms in read[1:]:
        for what, a, b in (
            ("arms", list(arms0), list(arms)),
            ("budget per arm and seed (device-s)", s0.budget_s_per_arm_and_seed, s.budget_s_per_arm_and_seed),
            ("proposer", s0.proposer, s.proposer),
            ("incumbent every arm started from", s0.incumbent, s.incumbent),
        ):
            if a != b:
                raise UsageError(
                    f"--combine: {cid0} and {cid} differ in their {what} ({a} against {b}); "
                    "only seeds of one comparison combine"
                )


def _seeds(cid: str, arms: dict[str, list[ArmRun]]) -> list[int]:
    """The comparison's seeds, which every arm must have alike."""
    per_arm = {arm: [r.seed for r in rows] for arm, rows in arms.items()}
    seeds = next(iter(per_arm.values()), [])
    if any(v != seeds for v in per_arm.values()):
        raise UsageError(f"--combine: {cid}'s arms ran different seeds ({per_arm}); it did not finish")
    return [int(s) for s in seeds if s is not None]


def _replays(summaries: list[CompareSummary]) -> dict[str, Replay]:
    """Each arm's false-win replays, their rows concatenated and the rate recounted."""
    out: dict[str, Replay] = {}
    for arm in dict.fromkeys(a for s in summaries for a in (s.replay or {})):
        parts = [s.replay[arm] for s in summaries if s.replay and arm in s.replay]
        rows = [row for part in parts for row in part.rows]
        scored = [r for r in rows if r.false_win is not None]
        rate = false_win_rate(sum(bool(r.false_win) for r in scored), len(scored))
        out[arm] = Replay(
            promoted=sum(p.promoted for p in parts),
            scored=len(scored),
            rows=rows,
            false_win_rate=RateRecord.of(rate),
        )
    return out


__all__ = ["combine", "read_compare"]
