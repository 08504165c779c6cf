"""Helpers of the kill -9 / resume end-to-end tests: a real ``segfactory run`` in its own process
group, the wait for its sandbox, the kill, and the readers of what it left (audit log, ledger,
checkpoints) plus the sentinel search over everything an agent can see.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import REPO

SANDBOX_WAIT_S = 300.0  # how long a run may take to start its first ticket's sandbox
INSIDE_SANDBOX_S = 4.0  # kill this long after the sandbox showed up: training is under way then
EXIT_WAIT_S = 600.0  # one invocation of `segfactory run` (demo, one ticket) ends well within this
POLL_S = 0.5
AGENT_ACTORS = {"proposer", "code-agent", "judge", "runner", "sandbox", "scheduler"}


@dataclass
class Invocation:
    """One ``segfactory run`` process: its exit code and stderr (progress lines)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class KillRun:
    """A home and the ``segfactory run`` processes started on it, one at a time."""

    home: Path
    logs: Path
    env: dict[str, str]
    invocations: list[Invocation] = field(default_factory=list)

    def start(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        n = len(self.invocations)
        cmd = [sys.executable, "-m", "segfactory", "run", *args, "--home", str(self.home), "--json"]
        out, err = (self.logs / f"run{n}.out").open("w"), (self.logs / f"run{n}.err").open("w")
        with out, err:  # the child holds its own copies of the descriptors
            return subprocess.Popen(
                cmd,
                stdout=out,
                stderr=err,
                text=True,
                cwd=REPO,
                env={**self.env, **(extra_env or {})},
                start_new_session=True,
            )

    def finish(self, proc: subprocess.Popen[str], args: list[str], started: float) -> Invocation:
        """Wait for ``proc``, then SIGKILL whatever is left in its process group (an orphaned gate)."""
        try:
            proc.wait(timeout=EXIT_WAIT_S)
        finally:
            kill_group(proc.pid)
        n = len(self.invocations)
        run = Invocation(
            args,
            proc.returncode,
            (self.logs / f"run{n}.out").read_text(),
            (self.logs / f"run{n}.err").read_text(),
            time.monotonic() - started,
        )
        self.invocations.append(run)
        return run

    def run(self, *args: str, extra_env: dict[str, str] | None = None) -> Invocation:
        started = time.monotonic()
        return self.finish(self.start(*args, extra_env=extra_env), list(args), started)

    def run_and_kill_in_sandbox(self, *args: str) -> tuple[Invocation, str]:
        """Start a run, wait until its first ticket's sandbox runs, kill -9 the whole run;
        (result, run id)."""
        started = time.monotonic()
        proc = self.start(*args)
        try:
            run_id, pid = self.wait_for_sandbox(proc)
            time.sleep(INSIDE_SANDBOX_S)
            assert proc.poll() is None and pid_alive(pid), (
                "the run ended before it could be killed mid-ticket"
            )
            os.killpg(proc.pid, signal.SIGKILL)
        except BaseException:
            kill_group(proc.pid)
            raise
        return self.finish(proc, list(args), started), run_id

    def wait_for_sandbox(self, proc: subprocess.Popen[str]) -> tuple[str, int]:
        """The run id, and the pid of the ticket sandbox: a bwrap of the run working in ``/work``.

        The sandbox verify at start also runs one, before any ticket folder exists; the confined
        scorers run theirs in ``/tmp``.
        """
        deadline = time.monotonic() + SANDBOX_WAIT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"the run exited ({proc.returncode}) before its sandbox started")
            tickets = [p for p in (self.home / "runs").glob("r*/tickets/*") if p.is_dir()]
            for pid, argv in processes() if tickets else ():
                # bwrap's parent is the run, or the stager the run started (as root: /work's tmpfs)
                ours = proc.pid in (parent_of(pid), parent_of(parent_of(pid)))
                if Path(argv[0]).name == "bwrap" and _chdir(argv) == "/work" and ours:
                    return tickets[0].parent.parent.name, pid
            time.sleep(POLL_S)
        raise AssertionError(f"no ticket sandbox within SANDBOX_WAIT_S={SANDBOX_WAIT_S:g}")


def _chdir(argv: list[str]) -> str | None:
    return argv[argv.index("--chdir") + 1] if "--chdir" in argv[:-1] else None


def parent_of(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state letter


def processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every readable process."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0]:
                yield int(entry.name), [a.decode(errors="replace") for a in argv if a]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def left_running(marker: str) -> list[tuple[int, list[str]]]:
    """Processes whose command line mentions ``marker`` (the home): none may outlive a killed run."""
    return [(pid, argv) for pid, argv in processes() if any(marker in a for a in argv) and pid != os.getpid()]


# -- what the run left ---------------------------------------------------------------------------
def audit_records(home: Path) -> list[dict[str, Any]]:
    from audit.reader import iter_records

    return [r.model_dump(mode="json") for r in iter_records(home / "audit" / "log.jsonl")]


def events(
    records: list[dict[str, Any]], event: str, run_id: str, ticket: str | None = None
) -> list[dict[str, Any]]:
    found = [r for r in records if r["event"] == event and r.get("run_id") in (run_id, None)]
    if ticket is None:
        return found
    return [r for r in found if ticket in (r["payload"].get("ticket_id"), r["payload"].get("ticket"))]


def ledger_queries(home: Path, run_id: str) -> list[tuple[str, str, str]]:
    """(ticket id, tier, verdict) of every gate query of the run, from the gate's own ledger."""
    with sqlite3.connect(home / "vault" / "ledger.sqlite") as db:
        return [
            tuple(r)
            for r in db.execute(
                "SELECT ticket_id, tier, verdict FROM queries WHERE run_id = ? ORDER BY id", (run_id,)
            )
        ]


def checkpoints(home: Path, run_id: str) -> list[dict[str, Any]]:
    """Every checkpointed graph state of the run, decoded by LangGraph's own saver."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(home / "state.sqlite")
    try:
        saver = SqliteSaver(conn)
        return [
            {"values": t.checkpoint["channel_values"], "writes": t.pending_writes}
            for t in saver.list({"configurable": {"thread_id": run_id}})
        ]
    finally:
        conn.close()


# -- the sentinel ----------------------------------------------------------------------------------
def sentinel_forms(value: float) -> list[bytes]:
    """The ways a leaked float could be stored: its text (8+ decimals), float64 either endian."""
    text = f"{value:.8f}".encode()
    return [text, struct.pack("<d", value), struct.pack(">d", value)]


def sentinel_hits(
    home: Path, run_id: str, value: float, prompts: list[bytes], also: tuple[bytes, ...] = ()
) -> dict[str, list[str]]:
    """Where ``value`` (or any of ``also``) shows up in what an agent can see; empty lists: nowhere.

    prompts: the bytes the fake LLM received plus every blob an ``llm_*`` record references
    (HTTP request and response bodies byte for byte); workspaces: every file under
    runs/<id>/tickets/ (set-aside ones included); graph state: the raw checkpoint database and
    every decoded checkpoint; tool results: every audit record of an agent-side actor (proposer,
    code agent, judge, runner, sandbox, scheduler) and the blobs it references.
    """
    from audit.blobs import BlobStore, blob_refs

    forms = [*sentinel_forms(value), *also]
    blobs = BlobStore(home / "audit" / "blobs")
    records = [r for r in audit_records(home) if r["actor"] in AGENT_ACTORS]
    llm = [
        blobs.path_for(ref).read_bytes()
        for r in records
        if r["event"].startswith("llm_")
        for ref in blob_refs(r["payload"])
    ]
    tool = [json.dumps(r).encode() for r in records] + [
        blobs.path_for(ref).read_bytes() for r in records for ref in blob_refs(r["payload"])
    ]
    db = [p.read_bytes() for p in home.glob("state.sqlite*")]
    decoded = [repr(c).encode() for c in checkpoints(home, run_id)]
    files = sorted(
        p for p in (home / "runs" / run_id / "tickets").rglob("*") if p.is_file() and not p.is_symlink()
    )
    places = {
        "prompts": [("fake server", b) for b in prompts] + [("llm blob", b) for b in llm],
        "workspaces": [(str(p), p.read_bytes()) for p in files],
        "graph state": [("state.sqlite", b) for b in db] + [("checkpoint", b) for b in decoded],
        "tool results": [("audit", b) for b in tool],
    }
    return {
        place: [name for name, data in items if any(f in data for f in forms)]
        for place, items in places.items()
    }
