"""The sentinel search of ``test_resume_kill`` finds a leak in each place it searches.

A small home is built by hand (an audit log with an agent-side record and its blob, a LangGraph
checkpoint database, a ticket workspace); the sentinel is planted in one place at a time, as
text or as a float64, and ``sentinel_hits`` must name exactly that place.
"""

from __future__ import annotations

import json
import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from tests.e2e._killrun import sentinel_forms, sentinel_hits

SENTINEL = 0.8642097531
RUN = "r-finder"
CLEAN: dict[str, list[str]] = {"prompts": [], "workspaces": [], "graph state": [], "tool results": []}


class _State(TypedDict, total=False):
    notes: Annotated[list[Any], operator.add]


def _home(
    tmp_path: Path, *, in_blob: bytes = b"{}", in_state: Any = "nothing", in_workspace: bytes = b""
) -> Path:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    from audit.blobs import BlobStore
    from segfactory.records import AuditRecord

    home = tmp_path / "home"
    ref = BlobStore(home / "audit" / "blobs").put(in_blob)
    record = AuditRecord(
        seq=1,
        ts=0.0,
        run_id=RUN,
        actor="proposer",
        event="llm_attempt",
        payload={"request": ref, "response": None},
        prev="0" * 64,
        hash="0" * 64,
    )
    (home / "audit" / "log.jsonl").write_text(record.model_dump_json() + "\n")
    work = home / "runs" / RUN / "tickets" / f"{RUN}-t001" / "work"
    work.mkdir(parents=True)
    (work / "config.yaml").write_bytes(b"epochs: 2\n" + in_workspace)
    graph = StateGraph(_State)
    graph.add_node("note", lambda state: {"notes": [in_state]})
    graph.add_edge(START, "note")
    graph.add_edge("note", END)
    conn = sqlite3.connect(home / "state.sqlite", check_same_thread=False)
    graph.compile(checkpointer=SqliteSaver(conn)).invoke({"notes": []}, {"configurable": {"thread_id": RUN}})
    conn.close()
    return home


def test_a_clean_home_has_no_hit(tmp_path: Path) -> None:
    assert sentinel_hits(_home(tmp_path), RUN, SENTINEL, [b"a prompt"]) == CLEAN


@pytest.mark.parametrize("leak", ["prompt", "blob", "workspace", "state-text", "state-float"])
def test_each_leak_is_found_where_it_is(tmp_path: Path, leak: str) -> None:
    text = f"confirm-a object F1 {SENTINEL}".encode()
    home = _home(
        tmp_path,
        in_blob=json.dumps({"m": text.decode()}).encode() if leak == "blob" else b"{}",
        in_state=SENTINEL if leak == "state-float" else text.decode() if leak == "state-text" else "-",
        in_workspace=text if leak == "workspace" else b"",
    )
    hits = sentinel_hits(home, RUN, SENTINEL, [text if leak == "prompt" else b"a prompt"])
    expected = {
        "prompt": ["prompts"],
        "blob": ["prompts", "tool results"],
        "workspace": ["workspaces"],
        "state-text": ["graph state"],
        "state-float": ["graph state"],
    }[leak]
    assert sorted(place for place, names in hits.items() if names) == expected


def test_the_forms_cover_text_and_both_float64_byte_orders() -> None:
    text, little, big = sentinel_forms(SENTINEL)
    assert text == b"0.86420975" and little[::-1] == big and len(big) == 8
