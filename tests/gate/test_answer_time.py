"""The gate's one answer time: calibrated at start from its own verdict time, or a recorded override
never below it; refused starts say why. (Padding at the calibrated time: tests/gate/test_service.py.)"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from gate.calibrate import (
    ANSWER_TIME_ENV,
    ANSWER_TIME_FLOOR_S,
    ANSWER_TIME_MULTIPLE,
    META_REFERENCE,
    REFERENCE_DIR,
    CalibrationError,
    Measured,
    derive,
    parse_override,
    requested_override,
)
from gate.client import GateClient, running_gate
from gate.ledger import Ledger
from gate.replies import AnswerTime, GateStatus
from segfactory.errors import GateError
from tests.conftest import REPO
from tests.gate import models
from tests.gate.conftest import build_home

MEASURED = Measured(seconds=4.2, tier="confirm-a", version=1, reference_sha256="ab" * 32)


def _env(answer: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != ANSWER_TIME_ENV}
    return env if answer is None else {**env, ANSWER_TIME_ENV: answer}


# -- the rule, without a gate -------------------------------------------------------------------
def test_the_calibrated_answer_time_is_a_multiple_of_the_measured_time_with_a_floor() -> None:
    slow = derive(Measured(seconds=7.3, tier="confirm-b", version=2, reference_sha256="c" * 64), None)
    assert slow.source == "calibrated" and slow.seconds == 15.0  # 2 x 7.3 = 14.6, up to whole seconds
    assert slow.multiple == ANSWER_TIME_MULTIPLE and slow.floor_s == ANSWER_TIME_FLOOR_S
    assert (slow.tier, slow.tier_version, slow.measured_verdict_s) == ("confirm-b", 2, 7.3)
    quick = derive(Measured(seconds=0.4, tier="confirm-a", version=1, reference_sha256="c" * 64), None)
    assert quick.seconds == ANSWER_TIME_FLOOR_S


def test_an_override_is_seconds_or_a_multiple_and_is_recorded_with_its_source() -> None:
    seconds = derive(MEASURED, parse_override("600", "flag"))
    assert (seconds.seconds, seconds.source, seconds.requested) == (600.0, "flag", "600")
    times = derive(MEASURED, parse_override("2x", "env"))
    assert (times.seconds, times.source, times.multiple) == (9.0, "env", 2.0)  # 8.4 up to whole seconds
    assert requested_override(None, {ANSWER_TIME_ENV: "45"}) == parse_override("45", "env")
    assert requested_override("30", {ANSWER_TIME_ENV: "45"}) == parse_override("30", "flag")  # the flag wins
    assert requested_override(None, {}) is None


@pytest.mark.parametrize("given", ["0", "0x", "4", "0.5x", "4.19"])
def test_an_override_below_the_measured_time_or_zero_is_refused_naming_it(given: str) -> None:
    with pytest.raises(CalibrationError, match=r"below this gate's measured verdict time of 4\.20 s"):
        derive(MEASURED, parse_override(given, "env"))


@pytest.mark.parametrize("given", ["soon", "-3", "2y", "x", ""])
def test_a_malformed_override_is_refused_before_any_measuring(given: str) -> None:
    with pytest.raises(CalibrationError, match="is not a number of seconds"):
        parse_override(given, "env")


def test_an_agent_sees_the_answer_time_without_its_calibration() -> None:
    answer = derive(MEASURED, None)
    status = GateStatus(
        win_rule_sha256=None,
        win_rule_ok=True,
        pinned_code_sha256=None,
        pinned_code_ok=None,
        tiers=[],
        quarantine=[],
        current_best=None,
        answer_time=answer,
    )
    seen = status.for_agent().as_json()["answer_time"]
    assert seen == {
        "seconds": answer.seconds,
        "source": "calibrated",
    }  # the measured figure stays with people
    assert "measured_verdict_s" in status.as_json()["answer_time"]


def test_a_ledger_from_before_answer_times_gains_the_table(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE answer_times")  # a ledger written before the table existed
        db.execute("INSERT INTO meta VALUES ('win_rule_sha256', 'kept')")
    ledger = Ledger(path)
    try:
        ledger.record_answer_time(derive(MEASURED, None), pid=1)
        assert [a.source for a in ledger.answer_times()] == ["calibrated"]
        assert ledger.get_meta("win_rule_sha256") == "kept"
    finally:
        ledger.close()


# -- a served gate ------------------------------------------------------------------------------
def _start_error(home: Path, args: list[str], env: dict[str, str]) -> str:
    with pytest.raises(GateError, match="exited during start") as caught, running_gate(home, args, env=env):
        pass
    return str(caught.value)


@pytest.mark.bwrap
@pytest.mark.slow
def test_too_low_an_override_or_zero_does_not_start_the_gate(tmp_path: Path) -> None:
    home, _ = build_home(tmp_path / "home")
    for args, env in ((["--answer-time", "0.01"], _env()), ([], _env("0"))):
        error = _start_error(home, args, env)
        assert "below this gate's measured verdict time of" in error, error
    assert not Ledger(home / "vault" / "ledger.sqlite").answer_times()  # nothing was fixed


@pytest.mark.bwrap
@pytest.mark.slow
def test_gate_status_shows_the_answer_time_and_how_it_was_set(tmp_path: Path) -> None:
    home, _ = build_home(tmp_path / "home")
    with running_gate(home, ["--answer-time", "3x"], env=_env("600")) as client:
        by_flag = client.status().answer_time
        agent = GateClient(socket_path=client._token_path.parent / "gate.sock", role="agent")  # type: ignore[union-attr]
        try:
            seen = agent._call("GET", "/status").json()["answer_time"]
        finally:
            agent.close()
    assert by_flag is not None and by_flag.source == "flag" and by_flag.requested == "3x"
    assert by_flag.measured_verdict_s and by_flag.seconds >= 3 * by_flag.measured_verdict_s
    assert seen == {"seconds": by_flag.seconds, "source": "flag"}
    env = {**_env("2x"), "SEGFACTORY_HOME": str(home)}
    shown = subprocess.run(
        [sys.executable, "-m", "segfactory", "gate", "status", "--json"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=env,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    answer = AnswerTime.model_validate(json.loads(shown.stdout)["answer_time"])
    assert answer.source == "env" and answer.requested == "2x" and answer.tier == "confirm-a"
    text = subprocess.run(
        [sys.executable, "-m", "segfactory", "gate", "status"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=env,
    )  # fmt: skip
    assert "answer time" in text.stdout and "(env 2x: over the measured" in text.stdout, text.stdout
    recorded = Ledger(home / "vault" / "ledger.sqlite").answer_times()
    assert [a.source for a in recorded] == ["flag", "env", "env"]  # every start, and how it was set


def _out_of_range_model() -> object:
    """Passes intake, fails scoring: prob = 5 * image leaves [0, 1]."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["image", "k"], ["prob"])],
        "g",
        [helper.make_tensor_value_info("image", 1, ["N", 1, "H", "W"])],
        [helper.make_tensor_value_info("prob", 1, ["N", 1, "H", "W"])],
        initializer=[numpy_helper.from_array(np.array(5.0, np.float32), "k")],
    )
    model = helper.make_model(graph, opset_imports=models.OPSET)
    model.ir_version = 8
    return model


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_gate_that_cannot_measure_itself_does_not_start(tmp_path: Path) -> None:
    home, _ = build_home(tmp_path / "home")
    vault = home / "vault"
    ledger = Ledger(vault / "ledger.sqlite")
    bad = models.save(_out_of_range_model(), tmp_path / "bad.onnx")  # type: ignore[arg-type]
    sha = __import__("hashlib").sha256(bad.read_bytes()).hexdigest()
    (vault / REFERENCE_DIR / f"{sha}.onnx").write_bytes(bad.read_bytes())
    ledger.set_meta(META_REFERENCE, sha)
    error = _start_error(home, [], _env())
    assert "cannot measure its verdict time" in error and "outside [0, 1]" in error, error
    (vault / REFERENCE_DIR / f"{sha}.onnx").write_bytes(b"other bytes")
    assert "does not hash to" in _start_error(home, [], _env())
    for stale in (vault / REFERENCE_DIR).iterdir():
        stale.unlink()  # no reference at all, and the home's profile ("test") has no config to make one
    error = _start_error(home, [], _env())
    assert "has no reference model and none can be made" in error, error
    assert not ledger.answer_times()
    ledger.close()


# -- an answer time for what scoring a submission costs ---------------------------------------------
def test_a_submissions_answer_time_follows_its_scoring_cost_and_nothing_else() -> None:
    """The reference pair (a base-config candidate, the classical best) cost 100; a candidate of
    that cost judged against a best of that cost (scored afresh, whatever the cache holds) needs
    twice the time, an ensemble with flip views far more; never less than the answer time, never
    more than MAX_COST_SCALE times it; a cost that could not be counted counts as the pair's."""
    from gate.replies import MAX_COST_SCALE

    answer = AnswerTime(seconds=10.0, source="calibrated", reference_cost=100)
    assert answer.for_costs(100, 0) == 10.0  # the reference pair itself
    assert answer.for_costs(30, 0) == 10.0  # cheaper is not faster: never below the answer time
    assert answer.for_costs(100, 100) == 20.0  # a promoted best of the candidate's size
    assert answer.for_costs(600, 100) == 70.0  # three members, two views, against that best
    assert answer.for_costs(125, 100) == 23.0  # rounded up to whole seconds
    assert answer.for_costs(None, 100) == 20.0 and answer.for_costs(None, None) == 20.0
    assert answer.for_costs(10**12, 100) == 10.0 * MAX_COST_SCALE
    assert AnswerTime(seconds=10.0, source="flag").for_costs(600, 100) == 10.0  # nothing counted: as fixed
    # calibrated on a quick verdict (2 x 3.9 s under the 10 s floor): the scale applies before the floor
    quick = AnswerTime(
        seconds=10.0,
        source="calibrated",
        reference_cost=100,
        measured_verdict_s=3.9,
        multiple=2.0,
        floor_s=10.0,
    )
    assert quick.for_costs(100, 0) == 10.0 and quick.for_costs(100, 100) == 16.0  # 2 x 3.9 x 2 = 15.6
    assert quick.for_costs(600, 100) == 55.0  # 2 x 3.9 x 7 = 54.6
    assert answer.for_agent().as_json() == {"seconds": 10.0, "source": "calibrated", "reference_cost": 100}


def test_the_reference_pairs_cost_is_recorded_with_the_calibration() -> None:
    counted = Measured(seconds=4.2, tier="confirm-a", version=1, reference_sha256="ab" * 32, cost=1000)
    assert derive(counted, None).reference_cost == 1000
    assert derive(counted, parse_override("600", "flag")).reference_cost == 1000
    assert derive(MEASURED, None).reference_cost is None  # not counted: every answer as fixed
