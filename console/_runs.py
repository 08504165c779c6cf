"""Runs for the dashboard: the run's checkpointed graph state, its audit events, its plots.

A run is a ``runs/<id>/`` folder or a LangGraph thread of ``state.sqlite`` (thread id = run id).
The state is read straight from the latest checkpoint (no graph is built, nothing is resumed).
A run has ended once the audit log holds its ``run_end`` event. The console is for people, so
it shows ``runs/<id>/people/`` content (PNG plots, reports).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

from agents.graph import checkpoint_serde
from agents.state import FactoryState
from audit import iter_records
from audit.reader import LOG_NAME
from runner import NOT_EVIDENCE, PROGRESS_FILE
from segfactory.errors import UsageError
from segfactory.home import Home

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_PLOTS = 50  # PNG files listed per run
MAX_EVENTS = 200  # latest audit events shown per run


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise UsageError(f"{run_id!r} is not a run id")
    return run_id


def list_runs(home: Home) -> list[str]:
    """Every run id: run folders and checkpoint threads (approval threads left out)."""
    runs = {p.name for p in home.runs.iterdir() if p.is_dir()} if home.runs.is_dir() else set()
    if home.state_db.is_file():
        conn = sqlite3.connect(f"file:{home.state_db}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()
        except sqlite3.OperationalError:
            rows = []  # no checkpoint table yet
        finally:
            conn.close()
        runs |= {r[0] for r in rows if not r[0].startswith("approval:")}
    return sorted(r for r in runs if RUN_ID.match(r))


def run_state(home: Home, run_id: str) -> FactoryState:
    """The run's latest checkpointed state, read with the loop's own strict serializer (an empty
    state when the run has no checkpoint yet)."""
    if not home.state_db.is_file():
        return FactoryState(run_id=run_id)
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(home.state_db, check_same_thread=False, timeout=30)
    try:
        saver = SqliteSaver(conn, serde=checkpoint_serde())
        found = saver.get_tuple({"configurable": {"thread_id": run_id, "checkpoint_ns": ""}})
    except sqlite3.OperationalError:
        found = None
    finally:
        conn.close()
    values = found.checkpoint.get("channel_values", {}) if found else {}
    return FactoryState.of({**values, "run_id": run_id})


def run_events(home: Home, run_id: str) -> list[Any]:
    return [r for r in iter_records(home.audit / LOG_NAME) if r.run_id == run_id]


def run_ended(home: Home, run_id: str) -> str | None:
    """The run's stop reason once its ``run_end`` is in the audit log, else None."""
    for record in run_events(home, run_id):
        if record.event == "run_end":
            return str(record.payload.get("stop_reason") or "ended")
    return None


def plots(home: Home, run_id: str) -> list[str]:
    """Names of the PNG files under ``runs/<id>/people/`` (relative paths)."""
    people = home.people_dir(run_id)
    if not people.is_dir():
        return []
    return sorted(str(p.relative_to(people)) for p in people.rglob("*.png") if p.is_file())[:MAX_PLOTS]


def plot_path(home: Home, run_id: str, name: str) -> Path:
    """The file of one plot; refuses anything outside the run's people folder."""
    people = home.people_dir(check_run_id(run_id)).resolve()
    path = (people / name).resolve()
    if not path.is_relative_to(people) or path.suffix != ".png" or not path.is_file():
        raise UsageError(f"no plot {name!r} in run {run_id}")
    return path


TrainingRow = dict[str, str | int | float | None]  # ticket_id, note, then the worker's numbers (or None)


class QueueRow(TypedDict):
    id: str
    arm: str
    kind: str
    hypothesis: str


class RunProgress(TypedDict):
    """What the run page polls (``/api/runs/<id>``): no score of any kind."""

    run_id: str
    ended: bool
    stop_reason: str  # the run_end record's, else the state's (empty while it runs)
    tickets_run: int
    device_seconds: float
    current: str | None  # the ticket training now
    queue: list[QueueRow]
    history: list[dict[str, object]]  # VerdictEntry JSON forms
    decisions: list[dict[str, object]]  # JudgeDecision JSON forms
    taken_approvals: list[str]
    training: list[TrainingRow]


def progress(home: Home, run_id: str) -> RunProgress:
    """What the run page polls: counters, queue, verdict history, decisions, ended or not."""
    state = run_state(home, run_id)
    ended = run_ended(home, run_id)
    return {
        "run_id": run_id,
        "ended": ended is not None,
        "stop_reason": ended or state.stop_reason,
        "tickets_run": state.tickets_run,
        "device_seconds": state.device_seconds,
        "current": state.current.id if state.current else None,
        "queue": [
            {"id": t.id, "arm": t.arm.value, "kind": t.kind.value, "hypothesis": t.hypothesis}
            for t in state.queue
        ],
        "history": [h.model_dump(mode="json") for h in state.history],
        "decisions": [d.model_dump(mode="json") for d in state.decisions],
        "taken_approvals": list(state.taken_approvals),
        "training": [] if ended is not None else training(home, run_id),
    }


def training(home: Home, run_id: str) -> list[TrainingRow]:
    """Tickets of the run training now (a ``progress.json`` and no ``outcome.json`` yet), with the
    latest epoch the runner read from the sandbox: the sandbox's own report, not evidence. Only
    numbers pass (the host wrote the file, but its numbers came from sandboxed code)."""

    folder = home.tickets_dir(run_id)
    if not folder.is_dir():
        return []
    rows = []
    for ticket in sorted(folder.iterdir()):
        record = ticket / PROGRESS_FILE
        if not record.is_file() or (ticket / "outcome.json").exists() or not RUN_ID.match(ticket.name):
            continue
        try:
            data = json.loads(record.read_text()[:4096])
        except (OSError, ValueError):
            continue
        row: TrainingRow = {"ticket_id": ticket.name, "note": NOT_EVIDENCE}
        for key in (
            "epoch",
            "epochs",
            "train_loss",
            "device_seconds_spent",
            "device_seconds_left",
            "updated_at",
        ):
            value = data.get(key) if isinstance(data, dict) else None
            row[key] = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        rows.append(row)
    return rows
