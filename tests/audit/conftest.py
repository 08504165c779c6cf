"""Fixtures for the audit tests: a home with a log of ten anchored records."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit import AuditLog, MemoryAnchorStore
from segfactory.home import Home

RECORDS = 10


@pytest.fixture
def home(tmp_home: Path) -> Home:
    return Home(tmp_home)


@pytest.fixture
def anchored(home: Home) -> tuple[Home, MemoryAnchorStore]:
    """A log of RECORDS records whose head is anchored in a memory store."""
    store = MemoryAnchorStore()
    with AuditLog(home, store) as log:
        for i in range(RECORDS):
            log.append("runner", "step", {"i": i}, run_id="r1")
        log.close_run("r1")
    return home, store


def log_lines(home: Home) -> list[bytes]:
    return (home.audit / "log.jsonl").read_bytes().splitlines(keepends=True)


def write_lines(home: Home, lines: list[bytes]) -> None:
    (home.audit / "log.jsonl").write_bytes(b"".join(lines))


# A code ticket's worker that does what a hostile one would: it opens a decoy of the vault (the
# host's inotify sees that, whatever the reader), then /proc/1/environ through Python (the
# in-sandbox audit hook reports that), and still writes a valid model so the ticket ends DONE.
HOSTILE_WORKER = '''
"""Worker of a code ticket that reads where it must not, then trains nothing and exports a model."""
import sys
from pathlib import Path

args = dict(zip(sys.argv[1::2], sys.argv[2::2], strict=True))
with open("/vault/confirm-a/v1/masks.npy", "rb") as handle:
    handle.read(128)
try:
    with open("/proc/1/environ", "rb") as handle:
        handle.read()
except OSError:
    pass
out = Path(args["--out"])
out.mkdir()
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, "H", "W"])
graph = helper.make_graph([helper.make_node("Sigmoid", ["image"], ["prob"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
(out / "model.onnx").write_bytes(model.SerializeToString())
'''
DECOY_READ = "/vault/confirm-a/v1/masks.npy"
HOSTILE_TICKET = "hostile"


def run_code_ticket(root: Path, worker: str, ticket_id: str) -> Home:
    """A fresh home under ``root`` whose log holds one code ticket with ``worker`` as its
    vision/worker.py, run through the real runner in bwrap (asserted DONE)."""
    from runner import TicketStatus, execute_ticket
    from runner.scheduler import Admission, MemoryEstimator, Scheduler, SchedulerSettings
    from segfactory.records import Ticket
    from synthetic.splits import write_split
    from synthetic.versions import create_version
    from tests.runner.conftest import BASE_CONFIG, PROFILED
    from tests.vision._data import draw

    home = Home(root / "home")
    home.root.mkdir(parents=True)
    for name, n, seed in (("train", 8, 0), ("dev", 6, 1)):
        write_split(root / "src" / name, *draw(n, 32, seed), {"generator": "tests.discs"})
    version = create_version(
        home.root, "discs", {s: root / "src" / s for s in ("train", "dev")}, approve_it=True
    )
    settings = SchedulerSettings(reserve_bytes=0)
    scheduler = Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )
    ticket = Ticket(
        id=ticket_id,
        arm="agent-code",
        kind="code",
        hypothesis="a worker that does what it likes",
        change={"files": {"vision/worker.py": worker}},
        budget={"device_seconds": 120, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=1,
    )
    with AuditLog(home, MemoryAnchorStore()) as log:
        outcome = execute_ticket(
            ticket,
            home=home,
            dataset_version=version,
            backend="bwrap",
            base_config=dict(BASE_CONFIG),
            audit=log,
            run_id="r1",
            scheduler=scheduler,
        )
    assert outcome.status == TicketStatus.DONE, (outcome.reason, outcome.attempts)
    return home


@pytest.fixture(scope="session")
def ticket_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """A home whose audit log holds one real code ticket, run through the runner in bwrap, whose
    worker read a vault decoy and /proc/1/environ (run once per session: it costs a sandbox start
    and a confined dev scoring)."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    return run_code_ticket(tmp_path_factory.mktemp("ticket-home"), HOSTILE_WORKER, HOSTILE_TICKET)
