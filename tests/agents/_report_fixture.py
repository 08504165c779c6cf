"""A demo-like run report, built from the records a finished `make demo` run leaves.

Sixteen tickets over two rounds in the demo's shapes: the base config, the fresh-seed control,
targeted top-ups, a robustness change, TPE exploration, a failure, replicates; the milestone in
the gate's own records (``gate.milestone_report``), the chain milestone of the promotions,
``runs/promotions.jsonl`` rows, the approvals queue, and learning curves in the ticket
workspaces. ``HOSTILE`` is a hypothesis an LLM could write to get markup into the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agents import report as rpt
from agents.judge import Decision, JudgeDecision
from agents.promotion import MilestoneFile
from agents.state import FactoryState
from gate.milestone_report import ModelScore, TierScores
from segfactory.layout import Promotion
from segfactory.stats import Interval

RUN = "r20261203-0921"
CLASSICAL = "c1" * 32
START = "5a" * 32  # the best this run started from (promoted in an earlier run)
FIRST = "7f" * 32  # promoted in this run, then built on
BEST = "e4" * 32  # promoted in this run: the best at the end
HOSTILE = (
    "<img src=x onerror=alert(1)> ![beacon](http://203.0.113.9/p.png) [click](javascript:alert(1)) "
    "| breaks | the table & _emphasis_ **bold** <script>alert(2)</script>"
)
TIER = "sealed"


def _score(estimate: float, half: float, n: int = 1000) -> ModelScore:
    return ModelScore(
        object_f1=Interval(estimate, estimate - half, estimate + half, 0.1),
        pixel_iou=estimate * 0.8,
        dice=estimate * 0.9,
        object_recall=estimate * 0.95,
        n_images=n,
    )


def milestone(best: str = BEST, classical: str = CLASSICAL) -> dict[str, JsonValue]:
    """The final milestone file as ``HostServices.milestone`` writes it."""
    models = {best: _score(0.487, 0.018), classical: _score(0.155, 0.009)}
    never = {best: _score(0.486, 0.025, 400), classical: _score(0.149, 0.012, 400)}
    tiers = {
        "sealed": TierScores(version=1, models=models).as_json(),
        "never-queried": TierScores(version=1, models=never).as_json(),
    }
    return {
        "name": f"{RUN}-final",
        "run_id": RUN,
        "tiers": tiers,
        "models": {classical: "runs/baseline/baseline-classical.onnx", best: f"runs/{RUN}/best.onnx"},
        "best_sha256": best,
    }


def chain() -> dict[str, JsonValue]:
    """The chain milestone: this run's promotions and their parents that the final one missed."""
    models = {START: _score(0.463, 0.015), FIRST: _score(0.472, 0.016)}
    return {
        "name": f"{RUN}-chain",
        "run_id": RUN,
        "tiers": {"sealed": TierScores(version=1, models=models).as_json()},
    }


def as_milestone(data: dict[str, JsonValue] | None) -> MilestoneFile | None:
    """A milestone file's dict as the report reads it back (name and run id filled in if absent)."""
    return None if data is None else MilestoneFile.model_validate({"name": "m", "run_id": RUN, **data})


def as_promotions(rows: list[dict[str, JsonValue]]) -> list[Promotion]:
    return [Promotion.model_validate({"model": f"runs/{r['ticket_id']}/model.onnx", **r}) for r in rows]


def promotions() -> list[dict[str, JsonValue]]:
    return [
        {
            "sha256": START,
            "run_id": "r20261202-1733",
            "ticket_id": "r20261202-1733-t004",
            "config": {"epochs": 4},
        },
        {
            "sha256": FIRST,
            "run_id": RUN,
            "ticket_id": f"{RUN}-t003",
            "config": {"epochs": 4},
            "parent_sha256": START,
        },
        {
            "sha256": BEST,
            "run_id": RUN,
            "ticket_id": f"{RUN}-t009",
            "config": {"epochs": 4},
            "parent_sha256": FIRST,
        },
    ]


_TICKETS: list[tuple[str, str, str, dict[str, JsonValue], str, float | None, str]] = [
    # (id suffix, kind, hypothesis, change, verdict, dev object F1, built on)
    (
        "t001",
        "config",
        "default action: the current best retrained with a fresh seed (the control that every "
        "recommendation is compared with at the same cost)",
        {},
        "DEV_LOSS",
        0.452,
        START,
    ),
    (
        "t002",
        "data",
        "targeted_synthetic: size=tiny: defect failure 0.91 vs 0.42 elsewhere (n=151), reproduced on "
        "held-out half; training holds 48% of dev's share of such defects",
        {"topup": {"n": 250, "slice": "size=tiny", "generator": {"size_px": [1, 4]}}},
        "NO_WIN",
        0.468,
        START,
    ),
    (
        "t003",
        "data",
        "targeted_synthetic: contrast=low: defect failure 0.77 vs 0.40 elsewhere (n=98), reproduced on "
        "held-out half",
        {"topup": {"n": 250, "slice": "contrast=low"}},
        "WIN",
        0.479,
        START,
    ),
    ("t003-rep", "data", "", {"topup": {"n": 250, "slice": "contrast=low"}}, "WIN", 0.476, START),
    (
        "t004",
        "config",
        "training_change: perturbation_drop_detector_blur = 0.061 (threshold 0.02); widen the blur "
        "augmentation to the worst covered perturbation",
        {"augment": {"blur_sigma": [0.0, 1.5]}},
        "DEV_LOSS",
        0.431,
        FIRST,
    ),
    ("t005", "config", HOSTILE, {"lr": 0.002}, "DEV_LOSS", 0.402, FIRST),
    (
        "t006",
        "config",
        "exploration (TPE around the incumbent): batch_size, decoder_width, lr, weight_decay",
        {"batch_size": 32, "decoder_width": 24, "lr": 0.0031, "weight_decay": 0.0001},
        "DEV_LOSS",
        0.466,
        FIRST,
    ),
    (
        "t007",
        "config",
        "exploration (TPE around the incumbent): batch_size, decoder_width, epochs",
        {"batch_size": 16, "decoder_width": 32, "epochs": 6},
        "FAILED",
        None,
        FIRST,
    ),
    (
        "t008",
        "data",
        "targeted_synthetic: size=small, contrast=low: defect failure 0.58 vs 0.33 elsewhere (n=64), "
        "reproduced on held-out half; training holds 61% of dev's share of such defects",
        {"topup": {"n": 250, "slice": "size=small,contrast=low"}},
        "DEV_LOSS",
        0.474,
        FIRST,
    ),
    (
        "t009",
        "config",
        "exploration (TPE around the incumbent): batch_size, decoder_width, lr",
        {"batch_size": 32, "decoder_width": 32, "lr": 0.0024},
        "WIN",
        0.497,
        FIRST,
    ),
    ("t009-rep", "config", "", {"batch_size": 32, "decoder_width": 32, "lr": 0.0024}, "WIN", 0.493, FIRST),
    (
        "t010",
        "config",
        "default action: the current best retrained with a fresh seed (the control that every "
        "recommendation is compared with at the same cost)",
        {},
        "DEV_LOSS",
        0.481,
        BEST,
    ),
    (
        "t011",
        "data",
        "targeted_synthetic: size=tiny: defect failure 0.84 vs 0.39 elsewhere (n=151), reproduced on "
        "held-out half",
        {"topup": {"n": 250, "slice": "size=tiny"}},
        "DEV_LOSS",
        0.490,
        BEST,
    ),
    (
        "t012",
        "config",
        "exploration (TPE around the incumbent): decoder_width, lr, augment.noise_std",
        {"augment": {"noise_std": [0.0, 0.03]}, "decoder_width": 40, "lr": 0.0018},
        "NO_WIN",
        0.503,
        BEST,
    ),
    (
        "t013",
        "config",
        "exploration (TPE around the incumbent): batch_size, lr",
        {"batch_size": 64, "lr": 0.0042},
        "DEV_LOSS",
        0.455,
        BEST,
    ),
    (
        "t014",
        "config",
        "exploration (TPE around the incumbent): epochs, lr",
        {"epochs": 5, "lr": 0.0027},
        "DEV_LOSS",
        0.488,
        BEST,
    ),
]


def _row(
    suffix: str,
    kind: str,
    hyp: str,
    change: dict[str, JsonValue],
    verdict: str,
    f1: float | None,
    parent: str,
) -> Any:
    tid = f"{RUN}-{suffix}"
    original = tid.removesuffix("-rep") if suffix.endswith("-rep") else None
    best_then = {START: 0.463, FIRST: 0.479, BEST: 0.497}[parent]
    tier = ("confirm-b" if original else "confirm-a") if verdict in ("WIN", "NO_WIN") else None
    decision = {"t003": "promote", "t009": "promote", "t002": "reject", "t012": "reject"}.get(suffix)
    originals = {t[0]: t for t in _TICKETS}
    return rpt.TicketRow(
        ticket_id=tid,
        arm="agent",
        kind=kind,
        replicate_of=original,
        hypothesis=hyp or originals[suffix.removesuffix("-rep")][2],
        change=change,
        status="FAILED" if f1 is None else "DONE",
        reason="the sandbox ran past the ticket's 120 device-seconds (killed at 121.4 s)"
        if f1 is None
        else None,
        device_seconds=121.4 if f1 is None else 24.0,
        dev_metrics={} if f1 is None else {"object_f1": f1, "dice": f1 * 0.92},
        best_dev_object_f1=best_then,
        dev_win=None if f1 is None else f1 >= best_then + 0.005,
        verdict=verdict,
        tier=tier,
        decision=decision,
        decision_reason=(
            "confirm-a WIN and the replicate's confirm-b WIN: promoted by the coded rule"
            if decision == "promote"
            else ("confirm-a answered NO_WIN" if decision == "reject" else None)
        ),
        built_on=parent,
        built_on_ticket={p["sha256"]: p["ticket_id"] for p in promotions()}[parent],
    )


def rows() -> list[rpt.TicketRow]:
    return [_row(*t) for t in _TICKETS]


def curves(tickets_dir: Path) -> None:
    """Each trained ticket's learning curve where its sandboxed worker writes it."""
    for row in rows():
        if row.dev_metrics:
            out = tickets_dir / row.ticket_id / "work" / "out"
            out.mkdir(parents=True)
            lines = [json.dumps({"epoch": e, "train_loss": 0.6 / (e + 1) + 0.05}) for e in range(4)]
            (out / "learning_curve.jsonl").write_text("\n".join(lines) + "\n")


def _rounds(ticket_rows: list[rpt.TicketRow]) -> list[rpt.RoundRow]:
    out = []
    for k, sha in enumerate((START, FIRST, BEST), 1):
        tried = [
            rpt.TriedFix(
                ticket_id=t.ticket_id,
                hypothesis=t.hypothesis,
                change=t.change,
                verdict=t.verdict,
                dev_object_f1=t.dev_metrics.get("object_f1"),
                best_dev_object_f1=t.best_dev_object_f1,
                predicted={"metric": "miss_rate", "slice": "size=tiny", "direction": "down", "size": 0.12}
                if t.kind == "data"
                else None,
                observed_change=-0.031 if t.kind == "data" else None,
                held=False if t.kind == "data" else None,
            )
            for t in ticket_rows
            if t.built_on == sha and t.replicate_of is None
        ]
        weakness = (
            "targeted_synthetic-0: size=tiny: defect failure 0.91 vs 0.42 elsewhere (n=151), reproduced on "
            "held-out half; training_change-0: perturbation_drop_detector_blur = 0.061 (threshold 0.02)"
        )
        out.append(rpt.RoundRow(round=k, incumbent=sha, weakness=weakness, tried=tried))
    return out


def approvals() -> list[rpt.ApprovalRow]:
    return [
        rpt.ApprovalRow(
            id="r20261202-1733-dr1",
            status="approved",
            hypothesis="thin voids are under-represented; 200 real images of thin voids would help",
            run_id="r20261202-1733",
            taken_by=RUN,
            decided_by="ana",
        ),
        rpt.ApprovalRow(
            id=f"{RUN}-dr1",
            status="pending",
            hypothesis="data_request: real images of voids near the casting edge (slice edge=true, n=41)",
            run_id=RUN,
        ),
    ]


def demo_report(**update: Any) -> rpt.RunReport:
    """The report record ``_write_report`` builds at the end of a demo-like run."""
    ticket_rows = rows()
    promoted = [
        JudgeDecision(ticket_id=f"{RUN}-{t}", decision=Decision.PROMOTE, reason="both WINs", by="rule")
        for t in ("t003", "t009")
    ]
    counts = rpt.counts(ticket_rows, FactoryState(run_id=RUN, decisions=promoted))
    report = rpt.RunReport(
        run_id=RUN,
        profile="demo",
        proposer="rules",
        backend="bwrap",
        base_config="configs/run-demo.yaml",
        stop_reason="tickets: 16 tickets run (the demo's cap)",
        started_at=1764753660.0,
        ended_at=1764754414.0,
        win_rule_sha256="3f2a9c1e" * 8,
        headline=rpt.headline(
            as_milestone(milestone()), as_milestone(chain()), as_promotions(promotions()), RUN
        ),
        tickets=ticket_rows,
        not_run=[{"id": f"{RUN}-t015", "hypothesis": "exploration (TPE around the incumbent): lr"}],
        approvals=approvals(),
        counts=counts,
        device_seconds=434.0,
        milestone=milestone(),
        audit=rpt.AuditSummary(
            ok=True,
            records=1893,
            run_records=1204,
            head_seq=1892,
            anchor_seq=1892,
            unanchored_from=None,
            problems=[],
            protected_read_attempts=0,
            path_escape_attempts=0,
            findings=0,
        ),
        llm_usage={"calls": 0, "attempts": 0},
        analysis_dir=None,
        gate_tiers=["confirm-a", "confirm-b", "never-queried", "sealed"],
        rounds=_rounds(ticket_rows),
        hit_rate={
            "run_id": RUN,
            "recommendation": {"held": 0, "n": 4, "rate": 0.0, "low": 0.0, "high": 0.49},
            "default": {"held": 0, "n": 4, "rate": 0.0, "low": 0.0, "high": 0.49},
            "sealed": {"held": 0, "n": 0, "rate": 0.0, "low": 0.0, "high": 0.0},
        },
        refused=[
            {
                "hypothesis": "targeted_synthetic: shape=cluster: defect failure 0.66 vs 0.41 elsewhere "
                "(n=23)",
                "kind": "data",
                "reasons": ["the generator cannot target the slice term 'shape=cluster'"],
            }
        ],
    )
    return rpt.RunReport.model_validate({**dict(report), **update})  # updates validated as run() makes them


__all__ = [
    "BEST",
    "CLASSICAL",
    "FIRST",
    "HOSTILE",
    "RUN",
    "START",
    "curves",
    "demo_report",
    "milestone",
    "rows",
]
