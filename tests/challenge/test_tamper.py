"""A challenge re-derives from the host's own copy of the config, never from what the sandbox left.

The ticket's worker runs for real in bwrap and rewrites ``/work/config.yaml`` (its threshold and
seed) after training; a challenge that trusted that file would score with the worker's threshold.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from agents.challenge import ChallengeSetup, challenge_ticket
from agents.challenge._locate import locate
from audit import AuditLog
from runner import HOST_CONFIG_FILE, TicketStatus, execute_ticket
from runner import _ticket as runner_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion
from tests.challenge.conftest import RUN, dev_comparison
from tests.runner.conftest import BASE_CONFIG

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
TAMPERING_WORKER = '''
"""Writes a valid model, then rewrites the config it was given: a low threshold, another seed."""
import sys
from pathlib import Path

import yaml

args = dict(zip(sys.argv[1::2], sys.argv[2::2], strict=True))
config_path = Path(args["--config"])
config = yaml.safe_load(config_path.read_text())
out = Path(args["--out"])
out.mkdir()
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, "H", "W"])
graph = helper.make_graph([helper.make_node("Sigmoid", ["image"], ["prob"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
(out / "model.onnx").write_bytes(model.SerializeToString())
config.update({"threshold": 0.01, "seed": 4242})
config_path.write_text(yaml.safe_dump(config))
'''


def test_a_challenge_ignores_a_config_the_sandbox_rewrote(
    marked_home: Home,
    dataset: DatasetVersion,
    audit_log: AuditLog,
    scheduler: Scheduler,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the sandbox's planted files must still be there, unread: keep the finished workspace
    monkeypatch.setattr(runner_ticket, "discard_workspace", lambda work: True)
    ticket = Ticket(
        id="t1",
        arm="agent-code",
        kind="code",
        hypothesis="a worker that edits its own config",
        change={"files": {"vision/worker.py": TAMPERING_WORKER}},
        budget={"device_seconds": 60, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=11,
    )
    people = marked_home.people_dir(RUN)
    people.mkdir(parents=True)
    (people / "tickets.jsonl").write_text(ticket.model_dump_json() + "\n")
    outcome = execute_ticket(
        ticket,
        home=marked_home,
        dataset_version=dataset,
        backend="bwrap",
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id=RUN,
        scheduler=scheduler,
    )
    assert outcome.status is TicketStatus.DONE and outcome.evidence is not None, outcome.reason
    folder = marked_home.tickets_dir(RUN) / "t1"
    assert "threshold: 0.01" in (folder / "work" / "config.yaml").read_text()  # the sandbox did rewrite it
    assert (folder / HOST_CONFIG_FILE).is_file()
    host_threshold = outcome.evidence.threshold
    dev_f1 = float(outcome.evidence.dev_metrics["object_f1"])
    dev_comparison(
        marked_home, "t1", dev_f1, dev_f1 - 0.1
    )  # a claimed dev win, so there is something to challenge

    located = locate(marked_home, "t1")
    assert located.config["threshold"] == host_threshold != 0.01 and located.config["seed"] == 11
    setup = ChallengeSetup(marked_home, audit_log, backend="bwrap", scheduler=scheduler)
    record = challenge_ticket(setup, "t1", seeds=1)
    claimed = record.conditions[0]
    stable = {k: v for k, v in located.config.items() if k != "seed"}
    assert claimed.seed == 11
    assert claimed.config_sha256 == hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()
    assert "config" not in record.diff  # the re-run trained with the same (host) config


PLANTING_WORKER = '''
"""Writes a valid model, then leaves a FIFO and a link to /dev/zero among its own code's *.py."""
import os
import sys
from pathlib import Path

args = dict(zip(sys.argv[1::2], sys.argv[2::2], strict=True))
out = Path(args["--out"])
out.mkdir()
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, "H", "W"])
graph = helper.make_graph([helper.make_node("Sigmoid", ["image"], ["prob"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
(out / "model.onnx").write_bytes(model.SerializeToString())
code = Path("/work/code/vision")
os.mkfifo(code / "a_pipe.py")  # a reader that opens it blocks for ever
os.symlink("/dev/zero", code / "b_zero.py")  # a reader that follows it never reaches the end
(code / "c_planted.py").write_text("PLANTED = True\\n")  # ordinary files: only their hash would tell
with open(code / "worker.py", "a") as mine:
    mine.write("# rewritten by the sandbox\\n")
'''


def _host_code_sha256(files: dict[str, str]) -> str:
    """What the host gave the worker, hashed independently: its vision/ *.py with ``files`` over it."""
    from segfactory.home import SOURCE_ROOT

    tree = {}
    for dirpath, dirnames, names in os.walk(SOURCE_ROOT / "vision"):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = Path(dirpath) / name
                tree[path.relative_to(SOURCE_ROOT).as_posix()] = path.read_bytes()
    tree.update({name: text.encode() for name, text in files.items()})
    digest = hashlib.sha256()
    for name in sorted(tree):
        digest.update(name.encode() + b"\0" + tree[name])
    return digest.hexdigest()


@pytest.mark.timeout(600)  # before the fix, hashing the workspace's code hung on the FIFO
def test_a_challenge_hashes_the_hosts_code_never_what_the_sandbox_planted(
    marked_home: Home,
    dataset: DatasetVersion,
    audit_log: AuditLog,
    scheduler: Scheduler,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the sandbox's planted files must still be there, unread: keep the finished workspace
    monkeypatch.setattr(runner_ticket, "discard_workspace", lambda work: True)
    ticket = Ticket(
        id="t2",
        arm="agent-code",
        kind="code",
        hypothesis="a worker that plants a FIFO and a /dev/zero link in its code",
        change={"files": {"vision/worker.py": PLANTING_WORKER}},
        budget={"device_seconds": 60, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=11,
    )
    people = marked_home.people_dir(RUN)
    people.mkdir(parents=True)
    (people / "tickets.jsonl").write_text(ticket.model_dump_json() + "\n")
    common = {"dataset_version": dataset, "backend": "bwrap", "audit": audit_log, "run_id": RUN}
    outcome = execute_ticket(
        ticket, home=marked_home, base_config=dict(BASE_CONFIG), scheduler=scheduler, **common
    )
    assert outcome.status is TicketStatus.DONE and outcome.evidence is not None, outcome.reason
    code = marked_home.tickets_dir(RUN) / "t2" / "work" / "code" / "vision"
    assert stat.S_ISFIFO(os.lstat(code / "a_pipe.py").st_mode) and (code / "b_zero.py").is_symlink()
    assert (code / "c_planted.py").is_file() and (code / "worker.py").read_text().endswith("sandbox\n")
    dev_f1 = float(outcome.evidence.dev_metrics["object_f1"])
    dev_comparison(marked_home, "t2", dev_f1, dev_f1 - 0.1)
    setup = ChallengeSetup(marked_home, audit_log, backend="bwrap", scheduler=scheduler)
    record = challenge_ticket(setup, "t2", seeds=1)
    expected = _host_code_sha256({"vision/worker.py": PLANTING_WORKER})
    assert [c.code_sha256 for c in record.conditions] == [expected, expected]
    assert "code_sha256" not in record.diff
