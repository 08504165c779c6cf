"""Two vaults that differ only in held-back labels give agents byte-identical outputs but verdicts.

Two homes identical except for their held-back labels, driven by the same
fixed script, produce byte-identical agent-visible outputs apart from the verdicts, once
timestamps and generated ids are normalised. Agent-visible outputs are the gate's responses,
``runs/<id>/tickets/`` and the LLM request blobs. Both homes are built and driven at the same
path (one after the other), so the absolute paths the runner records agree without rewriting.

What legitimately differs, and how it is normalised (nothing else is):
- gate responses: the ``verdict`` value; the generated id of a malformed submission;
- ``tickets/<id>/outcome.json``: its ``wall_seconds`` (a wall-clock measurement);
- ``tickets/<id>/progress.json``: its ``updated_at`` and device-seconds spent and left (clock readings);
- LLM request blobs: the ``verdict`` values in the verdict history the proposer is shown.
The runner writes a ticket's folder before the host submits its model (as ``segfactory run``
does), so no verdict reaches ``tickets/``: those files must agree byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypedDict

import pytest

from tests.agents.fakes import Step, _server, openai_server
from tests.gate._agent_script import LLM_SCRIPT, RUN_ID, add_dataset, llm_request_blobs, run_script
from tests.gate.conftest import build_home

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
FAKE_LIFETIME_S = 900.0  # the fake LLM outlives the gate's start (it times a verdict) and padded answers

VERDICT_WORDS = rb"NO_WIN|WIN|INVALID|BUDGET_EXHAUSTED"
CLOCK_KEYS = frozenset(
    {"wall_seconds"}
)  # wall-clock measurements (the stand-in trainer reports fixed durations)
PROGRESS_CLOCK_KEYS = frozenset({"updated_at", "device_seconds_spent", "device_seconds_left"})


def _masked(body: bytes) -> bytes:
    """``body`` with every ``verdict`` value masked (also as escaped JSON inside a JSON string, as
    in an LLM request) and a malformed submission's generated ticket id masked."""
    body = re.sub(rb'(\\*"verdict\\*":\s*\\*")(' + VERDICT_WORDS + rb")", rb"\1<verdict>", body)
    return re.sub(rb'"malformed-[0-9a-f]+"', b'"malformed-<id>"', body)


def _clock_free(value: Any, keys: frozenset[str] = CLOCK_KEYS) -> Any:
    if isinstance(value, dict):
        return {k: ("<clock>" if k in keys else _clock_free(v, keys)) for k, v in value.items()}
    if isinstance(value, list):
        return [_clock_free(v, keys) for v in value]
    return value


def _ticket_files(home: Path) -> dict[str, bytes]:
    """Every file under runs/<id>/tickets/, normalised as the module docstring says."""
    root = home / "runs" / RUN_ID / "tickets"
    files: dict[str, bytes] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == "outcome.json":
            data = json.dumps(_clock_free(json.loads(data)), sort_keys=True).encode()
        if path.name == "progress.json":
            data = json.dumps(_clock_free(json.loads(data), PROGRESS_CLOCK_KEYS), sort_keys=True).encode()
        files[str(path.relative_to(root))] = data
    return files


def _verdicts(responses: list[bytes]) -> list[str]:
    return [json.loads(r).get("verdict", "") for r in responses if r.startswith(b"{")]


class Driven(TypedDict):
    """What one home's drive left for the comparison."""

    submits: list[bytes]  # the gate's answers to /submit, as sent
    tickets: dict[str, bytes]  # every ticket file, normalised
    llm: list[bytes]  # every LLM request body


def _drive(tmp_path: Path, name: str, strong_labels: bool) -> Driven:
    """Build and drive a home at ``tmp_path/home`` (the same path for both, so paths inside agree)."""
    home, _ = build_home(tmp_path / "home", strong_labels=strong_labels)
    dataset = add_dataset(home, tmp_path / "src")
    responses: list[bytes] = []
    lifetime, _server.LIFETIME_S = _server.LIFETIME_S, FAKE_LIFETIME_S
    try:
        with openai_server([Step.call("propose_tickets", args) for args in LLM_SCRIPT]) as fake:
            run_script(home, dataset, fake.base_url, responses)
    finally:
        _server.LIFETIME_S = lifetime
    submits = [r for r in responses if b'"verdict"' in r]
    outputs: Driven = {"submits": submits, "tickets": _ticket_files(home), "llm": llm_request_blobs(home)}
    (tmp_path / "home").rename(tmp_path / name)
    (tmp_path / "src").rename(tmp_path / f"{name}-src")
    (tmp_path / "home-baseline.onnx").unlink()
    return outputs


def test_a_fixed_agent_script_sees_the_same_bytes_in_both_vaults_but_the_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    one, two = _drive(tmp_path, "one", False), _drive(tmp_path, "two", True)
    # The labels do change the verdicts: t001, its replicate, t002 (cached), the replay, non-ONNX, malformed.
    assert _verdicts(one["submits"]) == ["WIN", "WIN", "WIN", "WIN", "INVALID", "INVALID"]
    assert _verdicts(two["submits"]) == ["NO_WIN", "INVALID", "NO_WIN", "NO_WIN", "INVALID", "INVALID"]
    assert [_masked(r) for r in one["submits"]] == [_masked(r) for r in two["submits"]]
    assert len(one["submits"]) == 6  # three tickets through the runner, a replay, a non-ONNX, malformed JSON
    assert set(one["tickets"]) == set(two["tickets"]) and any(
        k.endswith("model.onnx") for k in one["tickets"]
    )
    differing = [k for k in one["tickets"] if one["tickets"][k] != two["tickets"][k]]
    assert differing == []
    assert len(one["llm"]) == len(two["llm"]) == 2
    assert one["llm"][0] == two["llm"][0]  # before any verdict: byte-identical, unnormalised
    assert one["llm"][1] != two["llm"][1]  # the second request shows the verdict history...
    assert _masked(one["llm"][1]) == _masked(two["llm"][1])  # ...and differs in nothing else
