"""GPU passthrough, specified on the CPU: the driver's description of the host's GPUs, the plan
for an assignment, bwrap's argument list, docker's device request, the environment inside, the
verify check, the scheduler's assignment, and every refusal before anything starts.

The driver tree and ``/dev`` are stand-ins under ``tmp_path`` (this machine has no GPU); the
backends' own code builds the argument list and the host config from them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox._policy import load_policy
from segfactory.errors import PolicyError
from segfactory.gpus import Gpu, GpuPlan, host_gpus, plan_gpus

UUID0 = "GPU-0b8c3c52-2a8e-4d8e-9b55-3b8b1e1d0000"
UUID1 = "GPU-7f1a9e2d-5c4b-4a3e-8f6d-2e9c1a4b1111"


def _driver(root: Path) -> tuple[Path, Path]:
    """A driver tree with two H200s (listed out of minor order) and their /dev nodes."""
    info, dev = root / "gpus", root / "dev"
    for bus, minor, uuid in (("0000:c1:00.0", 1, UUID1), ("0000:41:00.0", 0, UUID0)):
        (info / bus).mkdir(parents=True)
        (info / bus / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.99.00.01\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDevice Minor: \t {minor}\n"
        )
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidia-caps"):
        (dev / name).touch()
    return info, dev


def test_the_driver_describes_each_gpu_by_minor(tmp_path: Path) -> None:
    info, _ = _driver(tmp_path)
    assert host_gpus(info) == [
        Gpu(0, UUID0, "NVIDIA H200", "0000:41:00.0"),
        Gpu(1, UUID1, "NVIDIA H200", "0000:c1:00.0"),
    ]
    assert host_gpus(tmp_path / "no-driver") == []


def test_an_assigned_gpu_gets_its_node_and_the_control_nodes_only(tmp_path: Path) -> None:
    info, dev = _driver(tmp_path)
    plan = plan_gpus([1], host_gpus(info), dev)
    assert plan.nodes() == [dev / "nvidiactl", dev / "nvidia-uvm", dev / "nvidia-uvm-tools", dev / "nvidia1"]
    assert (
        plan.bwrap_args()[:2] == ["--dev-bind", str(dev / "nvidiactl")]
        and str(dev / "nvidia0") not in plan.bwrap_args()
    )
    # CUDA's own numbering need not follow the minors: inside, the UUID names the GPU
    assert plan.env() == {"CUDA_VISIBLE_DEVICES": UUID1, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert plan.record() == [{"minor": 1, "uuid": UUID1, "model": "NVIDIA H200"}]


def test_no_assignment_binds_nothing_and_sets_nothing(tmp_path: Path) -> None:
    info, dev = _driver(tmp_path)
    plan = plan_gpus([], host_gpus(info), dev)
    assert plan.nodes() == [] and plan.env() == {} and plan.docker_device_requests() == []


@pytest.mark.parametrize(
    ("assigned", "message"),
    [
        (
            [2],
            "GPU 2 was assigned to the sandbox but is not on this machine; "
            "GPUs here: 0 (NVIDIA H200), 1 (NVIDIA H200)",
        ),
        ([0, 0], "names a GPU twice"),
    ],
)
def test_a_gpu_this_machine_lacks_is_refused_naming_what_it_has(
    tmp_path: Path, assigned: list[int], message: str
) -> None:
    info, dev = _driver(tmp_path)
    with pytest.raises(PolicyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_gpus(assigned, host_gpus(info), dev)


def test_a_gpu_without_its_device_node_is_refused(tmp_path: Path) -> None:
    info, dev = _driver(tmp_path)
    (dev / "nvidia1").unlink()
    with pytest.raises(PolicyError, match="GPU 1 has no device node .*nvidia1; is the NVIDIA driver loaded"):
        plan_gpus([1], host_gpus(info), dev)


def test_on_a_machine_without_gpus_a_spec_asking_for_one_starts_nothing(tmp_path: Path) -> None:
    from sandbox import SandboxSpec, get_backend

    if host_gpus():
        pytest.skip("this machine has an NVIDIA GPU")
    (tmp_path / "ws").mkdir()
    spec = SandboxSpec(command=["touch", "/work/ran"], workspace=tmp_path / "ws", gpus=[0])
    with pytest.raises(
        PolicyError,
        match="GPU 0 was assigned to the sandbox but is not on this machine; "
        "GPUs here: none: this machine has no NVIDIA GPU",
    ):
        get_backend("bwrap").run(spec)
    assert not (tmp_path / "ws" / "ran").exists()


def _session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: list[int]):  # type: ignore[no-untyped-def]
    import sandbox._session as session_module
    from sandbox import SandboxSpec

    info, dev = _driver(tmp_path / "host")
    monkeypatch.setattr(
        session_module,
        "plan_gpus",
        lambda assigned, control_nodes: plan_gpus(assigned, host_gpus(info), dev, control_nodes),
    )
    (tmp_path / "ws").mkdir()
    spec = SandboxSpec(
        command=["true"],
        workspace=tmp_path / "ws",
        gpus=gpus,
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
        decoys=False,
    )
    return session_module.Session(spec, load_policy(), None), dev


def test_bwrap_binds_the_assigned_gpu_after_its_fresh_dev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox._bwrap import BwrapBackend

    session, dev = _session(tmp_path, monkeypatch, [0])
    with session:
        args = BwrapBackend(load_policy())._bwrap_args(session, {}, 3)
    at = args.index("--dev")
    assert args[at : at + 2] == ["--dev", "/dev"]
    binds = [args[i + 1] for i, a in enumerate(args) if a == "--dev-bind"]
    assert binds == [str(dev / n) for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0")]
    assert args.index("--dev-bind") > at  # bound into the fresh /dev, not replaced by it
    assert not any("nvidia1" in a or "nvidia-caps" in a for a in args)
    # the caller's environment cannot widen the assignment
    assert session.env["CUDA_VISIBLE_DEVICES"] == UUID0


def test_docker_requests_exactly_the_assigned_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    from sandbox._docker import DockerBackend
    from sandbox._docker_work import WorkVolume

    backend = DockerBackend(load_policy())
    backend._api = docker.APIClient(
        base_url="unix:///nonexistent/docker.sock", version="1.43"
    )  # never dialled
    session, _ = _session(tmp_path, monkeypatch, [1])
    with session:
        config = backend._host_config(session, WorkVolume(backend._api, session, "image", "1:1", {}))
    assert config["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 0, "DeviceIDs": [UUID1], "Capabilities": [["gpu"]], "Options": {}}
    ]
    none, _ = _session(tmp_path / "none", monkeypatch, [])
    with none:
        assert "DeviceRequests" not in backend._host_config(
            none, WorkVolume(backend._api, none, "image", "1:1", {})
        )


def test_verify_fails_unless_exactly_the_assigned_gpus_are_visible() -> None:
    from sandbox._verify import _gpu_check

    seen = {"visible": [1], "models": {"1": "NVIDIA H200"}, "cuda_visible_devices": UUID1}
    assert _gpu_check({"gpus": seen}, [1]).ok
    assert not _gpu_check({"gpus": seen}, [0]).ok  # another GPU than assigned
    assert not _gpu_check({"gpus": {**seen, "visible": []}}, [1]).ok  # the assigned GPU is missing
    assert not _gpu_check({"gpus": seen}, []).ok  # visible without an assignment
    assert not _gpu_check({}, []).ok  # the probe did not look
    empty = _gpu_check({"gpus": {"visible": [], "models": {}}}, [])
    assert empty.ok and empty.detail["note"].startswith("no GPU was assigned")


def test_the_policy_may_name_driver_control_nodes_never_a_gpu(tmp_path: Path) -> None:
    import yaml

    from sandbox._policy import POLICY_PATH

    raw = yaml.safe_load(POLICY_PATH.read_text())
    raw["gpu_control_nodes"] = ["nvidiactl", "nvidia0"]
    bad = tmp_path / "sandbox.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(PolicyError, match="'nvidia0' is not an NVIDIA driver control node"):
        load_policy(bad)


def test_the_scheduler_assigns_no_gpu_on_the_cpu_and_refuses_a_cuda_profile_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import segfactory.gpus
    from runner.scheduler import Admission, MemoryEstimator, Scheduler, SchedulerSettings
    from segfactory.home import Home

    settings = SchedulerSettings()
    home = Home(tmp_path / "home")
    on_cpu = Scheduler(MemoryEstimator(home, None, "cpu"), Admission("cpu", 2**34, settings), settings)
    assert on_cpu.device_gpus() == []
    with on_cpu.admit(2**20) as gpus:
        assert gpus == []

    def on_cuda() -> Scheduler:
        return Scheduler(
            MemoryEstimator(home, None, "cuda"), Admission("cuda", 2**34, settings, lambda: 2**34), settings
        )

    monkeypatch.setattr(segfactory.gpus, "host_gpus", lambda: [Gpu(3, UUID1, "NVIDIA H200", "0000:c1:00.0")])
    one = on_cuda()
    assert one.device_gpus() == [3]
    with one.admit(2**20) as gpus:  # one GPU: the one the sandbox gets
        assert gpus == [3]
    monkeypatch.setattr(segfactory.gpus, "host_gpus", lambda: [])
    with pytest.raises(PolicyError, match="device profile is for CUDA but this machine has no NVIDIA GPU"):
        on_cuda().device_gpus()


def test_an_empty_plan_is_the_default() -> None:
    assert GpuPlan().gpus == () and GpuPlan().bwrap_args() == []
