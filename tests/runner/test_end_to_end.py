"""A real ticket through the real bwrap sandbox: vision.worker trains, the host copies out and scores."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from audit import AuditLog, check_records, iter_records, load_policy
from runner import HOST_CONFIG_FILE, TicketOutcome, TicketStatus, execute_ticket
from runner.scheduler import Scheduler
from segfactory.home import Home
from segfactory.records import Ticket
from synthetic.versions import DatasetVersion
from tests.runner.conftest import BASE_CONFIG

pytestmark = [pytest.mark.slow]
needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


@pytest.fixture(
    params=[pytest.param("bwrap", marks=needs_bwrap), pytest.param("docker", marks=pytest.mark.docker)]
)
def backend(request: pytest.FixtureRequest) -> str:
    """Every sandbox backend; docker skips (with the reason) only when no engine can be started."""
    if request.param == "docker":
        from tests.sandbox.conftest import docker_problem

        if problem := docker_problem():
            pytest.skip(f"no Docker engine could be started: {problem}")
    return str(request.param)


def test_ticket_trains_in_the_sandbox_with_host_computed_evidence_and_no_finding(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler, backend: str
) -> None:
    """The real worker trains; and what it does (torch's imports, its ctypes loads, the compiler
    runs of ctypes.util.find_library, its /proc reads) is no finding: an honest ticket is not held."""
    ticket = Ticket(
        id="e2e",
        arm="agent",
        kind="config",
        hypothesis="one epoch trains a usable model",
        change={"optim": {"lr": 0.003}, "epochs": 5},
        budget={"device_seconds": 240, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=3,
    )
    outcome = execute_ticket(
        ticket,
        home=home,
        dataset_version=dataset,
        backend=backend,
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert outcome.status == TicketStatus.DONE, (outcome.reason, outcome.attempts)
    assert check_records(iter_records(audit_log.path), load_policy(), home.root) == []
    assert len(outcome.attempts) == 1 and outcome.attempts[0].exit_code == 0
    assert outcome.device_seconds > 0
    evidence = outcome.evidence
    assert evidence is not None and evidence.dev_metrics["n_images"] == 12
    assert evidence.manifest["train"]["count"] == 24
    config = (home.tickets_dir("r1") / "e2e" / HOST_CONFIG_FILE).read_text()  # the workspace is gone
    assert "epochs: 1" in config and "seed: 3" in config  # the budget caps epochs; the ticket sets the seed
    assert outcome.sandbox_reported is not None  # the worker's own result.json, kept apart from evidence


OOM_WORKER = '''
"""Stand-in worker of a code ticket: needs batch_size * 48 MiB, then writes a tiny real model."""
import sys
from pathlib import Path

import numpy as np
import yaml

args = dict(zip(sys.argv[1::2], sys.argv[2::2], strict=True))
config = yaml.safe_load(Path(args["--config"]).read_text())
out = Path(args["--out"])
out.mkdir()  # like vision.worker: a leftover output folder from an earlier attempt is an error
block = np.ones(config["batch_size"] * 48 * 2**20, dtype=np.uint8)
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, "H", "W"])
graph = helper.make_graph([helper.make_node("Sigmoid", ["image"], ["prob"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
(out / "model.onnx").write_bytes(model.SerializeToString())
'''


def test_oom_in_a_memory_limited_sandbox_is_retried_at_half_the_batch(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, backend: str
) -> None:
    from runner.scheduler import Admission, MemoryEstimator, SchedulerSettings
    from tests.runner.conftest import PROFILED

    settings = SchedulerSettings(reserve_bytes=0, memory_limit_bytes=640 * 2**20)  # batch 16 needs 768 MiB
    scheduler = Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )
    ticket = Ticket(
        id="oom",
        arm="agent-code",
        kind="code",
        hypothesis="a bigger batch fits",
        change={"files": {"vision/worker.py": OOM_WORKER}, "config": {"batch_size": 16}},
        budget={"device_seconds": 120, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=5,
    )
    outcome = execute_ticket(
        ticket,
        home=home,
        dataset_version=dataset,
        backend=backend,
        base_config=dict(BASE_CONFIG),
        audit=audit_log,
        run_id="r1",
        scheduler=scheduler,
    )
    assert outcome.status == TicketStatus.DONE, (outcome.reason, outcome.attempts)
    assert [(a.batch_size, a.grad_accum, a.oom) for a in outcome.attempts] == [(16, 1, True), (8, 2, False)]


def continuation_ticket(tid: str, change: dict[str, object], seed: int) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind="config",
        hypothesis="training on from the parent's weights helps",
        change=change,
        budget={"device_seconds": 240, "epochs": 1},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.0},
        seed=seed,
    )


def test_a_child_trains_on_from_its_parents_weights_mounted_read_only(
    home: Home, dataset: DatasetVersion, audit_log: AuditLog, scheduler: Scheduler, backend: str
) -> None:
    from safetensors.torch import load_file

    from sandbox import SandboxSpec, get_backend

    def run(ticket: Ticket, **kw: object) -> TicketOutcome:
        return execute_ticket(
            ticket,
            home=home,
            dataset_version=dataset,
            backend=backend,
            base_config=dict(BASE_CONFIG),
            audit=audit_log,
            run_id="r1",
            scheduler=scheduler,
            **kw,  # type: ignore[arg-type]
        )

    parent = run(continuation_ticket("parent", {"optim": {"lr": 0.003}}, seed=3))
    assert parent.status == TicketStatus.DONE, parent.reason
    still = {"optim": {"lr": 1e-9}, "schedule": {"name": "constant", "warmup_epochs": 0}}
    child = run(continuation_ticket("child", still, seed=4), init_from=parent.continuation())
    assert child.status == TicketStatus.DONE, (child.reason, child.attempts)
    tickets = home.tickets_dir("r1")
    before, after = (load_file(str(tickets / t / "model.safetensors")) for t in ("parent", "child"))
    learned = [k for k in before if "running" not in k and "num_batches" not in k]
    assert (
        max(float((before[k] - after[k]).abs().max()) for k in learned) < 1e-4
    )  # the parent's weights, kept
    assert child.sandbox_reported is not None and "init_s" in child.sandbox_reported["timings"]

    staged = tickets / "child" / "init"
    (
        tickets / "child" / "work"
    ).mkdir()  # a workspace for the probe: the child's was removed when it finished
    probe = (
        "import json; "
        "print(json.dumps([l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/init'])); "
        "open('/init/model.safetensors', 'ab').write(b'x')"
    )
    seen = get_backend(backend).run(
        SandboxSpec(
            command=["python", "-c", probe], workspace=tickets / "child" / "work", extra_ro={"/init": staged}
        )
    )
    (options,) = json.loads(seen.stdout.data)  # read back from inside: one mount at /init, read-only
    assert "ro" in options.split(",")
    assert seen.exit_code != 0  # and the write was refused
    assert (
        hashlib.sha256((staged / "model.safetensors").read_bytes()).hexdigest()
        == parent.continuation().sha256
    )
