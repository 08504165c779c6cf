"""Logs go through structlog on stderr: readable by default, one JSON object a line with --log-json."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from segfactory.logs import JSON_ENV, configure

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _restore_root_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.delenv(JSON_ENV, raising=False)
    yield
    root.handlers[:], root.level = handlers, level


def test_json_lines_carry_level_logger_event_and_time(capsys: pytest.CaptureFixture[str]) -> None:
    configure(json_lines=True)
    logging.getLogger("sandbox._cgroup").warning("cgroup %s is not writable", "/sys/fs/cgroup/x")
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    record = json.loads(line)
    assert record["event"] == "cgroup /sys/fs/cgroup/x is not writable"
    assert (record["level"], record["logger"]) == ("warning", "sandbox._cgroup")
    assert record["timestamp"].endswith("Z") and out == ""  # stdout is for --json objects only


def test_readable_by_default_and_quiet_below_the_level(capsys: pytest.CaptureFixture[str]) -> None:
    configure()
    logging.getLogger("gate.core").info("not shown at WARNING")
    logging.getLogger("gate.core").error("ledger %s locked", "v1")
    (line,) = capsys.readouterr().err.splitlines()
    assert "ledger v1 locked" in line and "error" in line and "gate.core" in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_the_cli_flag_switches_to_json_for_the_command_and_its_children() -> None:
    script = (
        "import logging, os; from cli import main; main(['--log-json', 'gate', '--help']); "
        "logging.getLogger('controls.compare').warning('arm %d of %d', 1, 3); print(os.environ['"
        + JSON_ENV
        + "'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stderr.strip().splitlines()[-1])
    assert record["event"] == "arm 1 of 3" and record["logger"] == "controls.compare"
    assert done.stdout.strip().endswith("1")  # inherited by a command restarted unprivileged
