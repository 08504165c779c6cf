"""The factory loop as a LangGraph ``StateGraph``.

analyse → propose → run → gate → judge → record, then back to propose, or on to
milestone → report once a budget (wall time, device-seconds, tickets, LLM tokens) is spent or
the proposer has nothing left. Each step lives in its own module (``agents.steps``); this one
only wires them. Checkpoints go to SQLite after every node, so a run resumes from the last
completed node (``thread_id`` = run id).

What the graph needs from the rest of the factory is the :class:`FactoryServices` protocol
(analysis, runner, gate, milestone, report); the graph state (``agents.state.FactoryState``)
holds no score of any kind: tickets, coarse verdicts, dev-win flags and budget counters only
(trust rules 4, 7, 9). The checkpointer revives only the state's own record types.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.faults import KILL_AT_ENV, fault_point
from agents.loop_deps import DEVICE_LEFT_SHARE, FactoryServices, LoopDeps
from agents.state import CHECKPOINT_TYPES, FactoryState
from agents.steps import JudgeStep, ProposeStep, RecordStep, TrainStep
from agents.steps.propose import PROPOSE_BATCH

if TYPE_CHECKING:  # langgraph is imported only when a graph is built: the CLI starts without it
    from langgraph.graph.state import CompiledStateGraph

RECURSION_LIMIT = 10_000  # graph steps per invoke; a run ends by budget long before this


def _after_propose(state: FactoryState) -> str:
    if state.stop_reason:
        return "milestone"
    if state.reanalyse:
        return "analyse"
    return "run" if state.queue else "milestone"


def _after_record(state: FactoryState) -> str:
    if state.stop_reason:
        return "milestone"
    # Tickets trained together with the current one are judged before anything else, even when the
    # best just moved: their device time is spent, and the gate compares each with its best of now.
    if state.trained:
        return "run"
    if state.reanalyse:  # the best moved: its weaknesses, not the old best's, come next
        return "analyse"
    return "run" if state.queue else "propose"


def checkpoint_serde() -> Any:
    """LangGraph's serializer, strict: a checkpoint may construct only the state's record types
    (``agents.state.CHECKPOINT_TYPES``); any other type named in it is left as inert data."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    allowed = [(cls.__module__, cls.__qualname__) for cls in CHECKPOINT_TYPES]
    return JsonPlusSerializer(allowed_msgpack_modules=allowed)


def build_graph(deps: LoopDeps, checkpoint_db: Path) -> CompiledStateGraph[FactoryState]:
    """The compiled graph with a SQLite checkpointer at ``checkpoint_db``."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    propose, train, judge, record = ProposeStep(deps), TrainStep(deps), JudgeStep(deps), RecordStep(deps)
    graph = StateGraph(FactoryState)
    graph.add_node("analyse", propose.analyse)
    graph.add_node("propose", propose.propose)
    graph.add_node("run", train.run)
    graph.add_node("gate", judge.gate)
    graph.add_node("judge", judge.judge)
    graph.add_node("record", record.record)
    graph.add_node("milestone", record.milestone)
    graph.add_node("report", record.report)
    graph.add_edge(START, "analyse")
    graph.add_edge("analyse", "propose")
    graph.add_conditional_edges("propose", _after_propose, ["run", "analyse", "milestone"])
    graph.add_edge("run", "gate")
    graph.add_edge("gate", "judge")
    graph.add_edge("judge", "record")
    graph.add_conditional_edges("record", _after_record, ["run", "propose", "analyse", "milestone"])
    graph.add_edge("milestone", "report")
    graph.add_edge("report", END)
    conn = sqlite3.connect(checkpoint_db, check_same_thread=False, timeout=30)
    return graph.compile(checkpointer=SqliteSaver(conn, serde=checkpoint_serde()))


def run_loop(graph: CompiledStateGraph[FactoryState], run_id: str, *, resume: bool = False) -> FactoryState:
    """Start run ``run_id``, or with ``resume`` continue it from its last checkpoint."""
    config: Any = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    start = None if resume else FactoryState(run_id=run_id)
    # durability="sync": each checkpoint is written before the next node starts, so a kill -9
    # loses at most the node that was running (the default "async" may lose several).
    return FactoryState.of(graph.invoke(start, config, durability="sync"))


__all__ = [
    "DEVICE_LEFT_SHARE",
    "KILL_AT_ENV",
    "PROPOSE_BATCH",
    "RECURSION_LIMIT",
    "FactoryServices",
    "FactoryState",
    "LoopDeps",
    "build_graph",
    "checkpoint_serde",
    "fault_point",
    "run_loop",
]
