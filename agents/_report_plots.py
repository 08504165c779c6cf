"""The run report's plots (people only): dev progress per ticket, the tickets' learning curves,
and the dev analysis's plots of the starting best, copied beside the report.

Plots use matplotlib's Agg backend (no display); matplotlib is imported when a plot is drawn.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import JsonValue

from agents._report_records import TicketRow
from runner import read_beneath
from segfactory.layout import TicketFiles

PLOTS_DIR = "plots"
LEGEND_ROWS = 8  # a curves legend takes another column past this many tickets
MAX_PLOT_WIDTH_IN = 12.0  # inches: past this many tickets the bars get narrower, the figure no wider


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def short_id(ticket_id: str) -> str:
    """``r7-t003-rep`` as ``t003-rep``: the part of a ticket id after its run id."""
    match = re.search(r"t\d+(-rep)?$", ticket_id)
    return match.group(0) if match else ticket_id


def dev_plot(rows: list[TicketRow], out: Path) -> bool:
    """The run's progress on dev: each ticket's object F1 against the best's at the time, promoted
    tickets marked (host-computed numbers only)."""
    scored = [r for r in rows if "object_f1" in r.dev_metrics]
    if not scored:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(min(max(4.0, 0.6 * len(scored)), MAX_PLOT_WIDTH_IN), 3.2))
    xs = list(range(len(scored)))
    colours = ["tab:green" if r.dev_win else "tab:grey" for r in scored]
    ax.bar(xs, [r.dev_metrics["object_f1"] for r in scored], color=colours, label="ticket (green: dev win)")
    best = [r.best_dev_object_f1 or 0.0 for r in scored]
    ax.hlines(best, [x - 0.45 for x in xs], [x + 0.45 for x in xs], colors="k", label="best at the time")
    for x, row in zip(xs, scored, strict=True):
        if row.decision == "promote":
            ax.annotate("promoted", (x, row.dev_metrics["object_f1"]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs, [short_id(r.ticket_id) for r in scored], rotation=45, fontsize=7)
    ax.set_ylabel("dev object F1")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True


CURVE_FILE = "out/learning_curve.jsonl"  # written by the worker inside the sandbox: shown, never evidence
MAX_CURVE_BYTES = 1024**2  # past this the curve is cut (read_beneath reports it truncated)


class CurvePoint(NamedTuple):
    """One point of a learning curve as the sandboxed worker reported it (shown, never evidence):
    its ``epoch`` as written (the point's place in the curve when it wrote none) and its train loss."""

    epoch: JsonValue
    train_loss: float


def _curve(ticket: TicketFiles) -> list[CurvePoint]:
    """A ticket's learning curve: the copy the runner took out of its workspace, else (a ticket
    still training, or one from before copies were taken) read beneath the workspace with no
    symlink followed."""
    try:
        data, _ = read_beneath(ticket.root, ticket.curve.name, cap=MAX_CURVE_BYTES)
    except Exception:  # not copied out: the workspace's own
        try:
            data, _ = read_beneath(ticket.work, CURVE_FILE, cap=MAX_CURVE_BYTES)
        except Exception:  # absent, refused (a symlink, a FIFO) or unreadable: no curve for this ticket
            return []
    points: list[CurvePoint] = []
    for line in data.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        loss = row.get("train_loss") if isinstance(row, dict) else None
        if isinstance(loss, int | float):
            points.append(CurvePoint(row.get("epoch", len(points)), loss))
    return points


def curves_plot(rows: list[TicketRow], tickets_dir: Path, out: Path) -> bool:
    """Train loss per epoch for every ticket that trained (as the sandboxed worker reported it)."""
    curves = {r.ticket_id: _curve(TicketFiles(tickets_dir / r.ticket_id)) for r in rows}
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for tid, curve in curves.items():
        ax.plot(
            [c.epoch for c in curve],
            [c.train_loss for c in curve],
            "o-",
            label=short_id(tid),
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("train loss (sandbox-reported)")
    ax.legend(fontsize=6, ncol=1 + len(curves) // LEGEND_ROWS, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True


def copy_analysis_plots(analysis_dir: Path | None, plots_dir: Path) -> dict[str, str]:
    """The starting best's dev-analysis plots, copied under ``plots_dir``: name -> relative path."""
    found: dict[str, str] = {}
    if analysis_dir is None:
        return found
    for name in ("errors.png", "slices.png", "learning_curve.png"):
        if (analysis_dir / name).is_file():
            shutil.copyfile(analysis_dir / name, plots_dir / f"best-{name}")
            found[name.removesuffix(".png")] = f"{PLOTS_DIR}/best-{name}"
    return found


__all__ = ["CURVE_FILE", "PLOTS_DIR", "copy_analysis_plots", "curves_plot", "dev_plot", "short_id"]
