"""The scheduler: profile fits, cached estimates, admission against free memory, OOM sizing."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runner import scheduler
from runner.scheduler import (
    ESTIMATE_SAFETY,
    PROBE_MEMORY_SHARE,
    PROBE_TIMEOUT_S,
    Admission,
    MemoryEstimator,
    Scheduler,
    SchedulerSettings,
    is_oom,
    load_profile,
    measure_peak,
    probe_memory_limit,
    save_profile,
    shrink_for_oom,
)
from segfactory.errors import DataError, LimitExceeded
from segfactory.gpus import Gpu
from segfactory.home import Home
from tests.runner.conftest import PROFILED
from vision.config import parse_config

MIB = 2**20


def test_profile_fit_and_estimate_scale_with_batch_and_area() -> None:
    intercept, slope, size = PROFILED.fit("unet-mobilenetv3") or (0, 0, 0)
    assert size == 32
    assert slope == pytest.approx(100 * MIB / 12)
    assert PROFILED.estimate("unet-mobilenetv3", 4, 32) == int(ESTIMATE_SAFETY * 600 * MIB)
    bigger = PROFILED.estimate("unet-mobilenetv3", 4, 64) or 0
    assert bigger == int(ESTIMATE_SAFETY * (intercept + 4 * slope * 4))  # 4x the area per image
    assert PROFILED.estimate("unet-resnet10t", 4, 32) is None


def test_profile_round_trips_through_the_home(home: Home) -> None:
    assert load_profile(home) is None
    save_profile(home, PROFILED)
    assert load_profile(home) == PROFILED


def test_estimates_are_cached_by_config_hash(home: Home) -> None:
    estimator = MemoryEstimator(home, PROFILED)
    first = estimator.estimate("unet-mobilenetv3", 8, 32)
    assert estimator.estimate("unet-mobilenetv3", 8, 32) == first
    assert (estimator.hits, estimator.probes) == (1, 0)
    cache = json.loads((home.root / "memory_estimates.json").read_text())
    assert list(cache.values()) == [first]
    again = MemoryEstimator(home, None)  # a new process: the cache answers without a probe
    assert again.estimate("unet-mobilenetv3", 8, 32) == first and again.probes == 0


def admission(free: Callable[[], int], **settings: Any) -> Admission:
    return Admission("cpu", 8 * 1024 * MIB, SchedulerSettings(reserve_bytes=1024 * MIB, **settings), free)


def test_an_estimate_larger_than_the_device_is_refused_at_once() -> None:
    with (
        pytest.raises(LimitExceeded, match="exceeds the device's 7168 MiB"),
        admission(lambda: 8 * 1024 * MIB).admit(7200 * MIB),
    ):
        pass


def test_admission_waits_for_free_memory_and_keeps_the_reserve() -> None:
    free = [1500 * MIB]
    gate = admission(lambda: free[0])
    assert not gate.fits(600 * MIB)  # 1500 - 1024 reserve = 476 MiB of headroom
    with pytest.raises(LimitExceeded, match="did not fit"), gate.admit(600 * MIB, wait_s=0.2):
        pass
    threading.Timer(0.3, lambda: free.__setitem__(0, 4000 * MIB)).start()
    started = time.monotonic()
    with gate.admit(600 * MIB, wait_s=5):
        assert time.monotonic() - started >= 0.25
        assert not gate.fits(2400 * MIB)  # in-flight estimates count against free memory
    assert gate.fits(2400 * MIB)


def test_concurrency_is_a_setting() -> None:
    gate = admission(lambda: 64 * 1024 * MIB, concurrency=2)
    inside, peak = [0], [0]
    lock = threading.Lock()

    def ticket() -> None:
        with gate.admit(10 * MIB, wait_s=10):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=ticket) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 2


def test_with_several_gpus_concurrent_tickets_spread_over_them_and_wait_when_none_has_room(
    home: Home,
) -> None:
    """Each GPU its own admission; a ticket goes to the one with the most headroom that fits it."""
    settings = SchedulerSettings(reserve_bytes=1024 * MIB, concurrency=4, admission_wait_s=5)
    free = {0: 8 * 1024 * MIB, 1: 8 * 1024 * MIB}  # what each GPU's driver reports free
    gpus = {
        minor: Admission("cuda", 8 * 1024 * MIB, settings, lambda minor=minor: free[minor]) for minor in free
    }
    scheduler = Scheduler(
        MemoryEstimator(home, None, "cuda"),
        Admission("cuda", 8 * 1024 * MIB, settings),
        settings,
        gpu_admissions=gpus,
    )
    assert scheduler.device_gpus() == [0, 1]
    with scheduler.admit(3000 * MIB) as first, scheduler.admit(3000 * MIB) as second:
        assert (first, second) == (
            [0],
            [1],
        )  # both would fit on GPU 0: the second goes where the first is not
        free[1] = 2000 * MIB  # another tenant takes most of GPU 1
        with scheduler.admit(2000 * MIB) as third:
            assert third == [0]  # 8192 - 1024 - 3000 = 4168 MiB of headroom on GPU 0, none on GPU 1
        free[0] = free[1] = 5500 * MIB  # both busier: 1476 MiB of headroom each
        started = time.monotonic()
        threading.Timer(0.6, lambda: free.__setitem__(1, 8 * 1024 * MIB)).start()
        with scheduler.admit(2000 * MIB) as fourth:  # fits nowhere until GPU 1 is freed
            assert fourth == [1] and time.monotonic() - started >= 0.5
    with pytest.raises(LimitExceeded, match="exceeds every GPU's 7168 MiB"), scheduler.admit(7200 * MIB):
        pass
    tight = Scheduler(
        MemoryEstimator(home, None, "cuda"),
        Admission("cuda", 8 * 1024 * MIB, settings),
        settings.model_copy(update={"admission_wait_s": 0.3}),
        gpu_admissions=gpus,
    )
    free[0] = free[1] = 1500 * MIB
    with (
        pytest.raises(LimitExceeded, match="did not fit in the free memory of any of 2 GPUs"),
        tight.admit(600 * MIB),
    ):
        pass


def test_the_gates_scoring_gpu_keeps_its_reserve_free_of_tickets(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ticket that filled the gate's GPU would turn a rival's verdict into INVALID: the first GPU
    (where the gate scores) keeps the gate's reserve on top of the tenants' reserve."""
    settings = SchedulerSettings(reserve_bytes=1024 * MIB, gate_reserve_bytes=2048 * MIB, concurrency=4)
    gate_gpu = Admission("cuda", 8 * 1024 * MIB, settings, lambda: 8 * 1024 * MIB, gate_gpu=True)
    assert gate_gpu.capacity() == 5 * 1024 * MIB and gate_gpu.headroom() == 5 * 1024 * MIB
    with (
        pytest.raises(LimitExceeded, match="exceeds the device's 5120 MiB .* reserve of 3072 MiB"),
        gate_gpu.admit(6000 * MIB),
    ):
        pass
    gpus = [Gpu(minor=m, uuid=f"GPU-{m}", model="H100", bus=f"0000:0{m}:00.0") for m in (3, 5)]
    monkeypatch.setattr(Scheduler, "_host_gpus", lambda self: gpus)
    monkeypatch.setattr(scheduler, "gpu_free_bytes", lambda uuid: 8 * 1024 * MIB)
    several = Scheduler(
        MemoryEstimator(home, None, "cuda"), Admission("cuda", 8 * 1024 * MIB, settings), settings
    )
    per_gpu = several._per_gpu()
    assert per_gpu[3].headroom() == 5 * 1024 * MIB and per_gpu[5].headroom() == 7 * 1024 * MIB
    with several.admit(6000 * MIB) as where:
        assert where == [5]  # fits only where the gate does not score
    assert "gate's GPU" in several.auto_concurrency(1024 * MIB).basis


def test_the_ticket_slots_bound_the_host_not_each_gpu(home: Home) -> None:
    settings = SchedulerSettings(reserve_bytes=0, concurrency=1, admission_wait_s=0.3)
    gpus = {minor: Admission("cuda", 8 * 1024 * MIB, settings, lambda: 8 * 1024 * MIB) for minor in (0, 1)}
    scheduler = Scheduler(
        MemoryEstimator(home, None, "cuda"),
        Admission("cuda", 8 * 1024 * MIB, settings),
        settings,
        gpu_admissions=gpus,
    )
    with (
        scheduler.admit(10 * MIB),
        pytest.raises(LimitExceeded, match="no free ticket slot"),
        scheduler.admit(10 * MIB),
    ):
        pass


def test_oom_detection_and_shrinking() -> None:
    assert is_oom(137, False, "") and is_oom(1, True, "")
    assert is_oom(1, False, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_oom(1, False, "Traceback ...\nMemoryError")
    assert not is_oom(1, False, "ValueError: bad config") and not is_oom(0, False, "MemoryError")
    config = parse_config({"epochs": 2, "batch_size": 16, "grad_accum": 1})
    smaller = shrink_for_oom(config)
    assert smaller is not None and (smaller.batch_size, smaller.grad_accum) == (8, 2)
    assert smaller.model_dump() == {**config.model_dump(), "batch_size": 8, "grad_accum": 2}  # nothing else
    assert shrink_for_oom(parse_config({"epochs": 2, "batch_size": 1, "grad_accum": 8})) is None
    with pytest.raises(ValueError):
        SchedulerSettings(concurrency=0)


def test_concurrent_tickets_on_the_cpu_split_its_cores_and_a_gpu_or_one_ticket_keeps_the_policys(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.scheduler import Scheduler

    def scheduler(device: str, concurrency: int) -> Scheduler:
        settings = SchedulerSettings(concurrency=concurrency)
        return Scheduler(
            MemoryEstimator(home, None, device), Admission(device, PROFILED.total_bytes, settings), settings
        )

    monkeypatch.setattr("runner.scheduler.host_cores", lambda: 16)
    assert [scheduler("cpu", n).cpu_share() for n in (1, 2, 3, 4, 32)] == [None, 8, 5, 4, 1]
    assert scheduler("cuda", 4).cpu_share() is None


def test_a_share_of_the_cores_tightens_the_sandbox_policy_and_never_loosens_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from runner import _launch
    from runner._launch import LaunchRequest, SandboxLauncher
    from sandbox import load_policy

    seen: list[Any] = []

    class Recording:
        def run(self, spec: Any) -> Any:
            seen.append(spec)
            raise RuntimeError("recorded")

    monkeypatch.setattr(_launch, "get_backend", lambda name: Recording())  # where the launcher calls it
    policy_cpus = load_policy().defaults.cpus
    for cpus in (1.0, policy_cpus * 4, None):
        request = LaunchRequest(command=["true"], workspace=tmp_path, data={}, timeout_s=10, cpus=cpus)
        with pytest.raises(RuntimeError, match="recorded"):
            SandboxLauncher("bwrap").launch(request)
    assert seen[0].limits.cpus == 1.0 and seen[1].limits.cpus == policy_cpus and seen[2].limits is None


@pytest.mark.slow  # ~15 s: two real probe processes
def test_a_probe_is_confined_to_a_memory_cap_and_a_config_past_it_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert probe_memory_limit() == int(PROBE_MEMORY_SHARE * host) and PROBE_MEMORY_SHARE <= 0.5
    monkeypatch.setattr(scheduler, "PROBE_MEMORY_SHARE", 1.5 * 1024**3 / host)
    assert measure_peak("unet-mobilenetv3", 4, 32, "cpu").peak_bytes > 0  # a demo-sized probe fits
    started = time.monotonic()
    with pytest.raises(DataError, match=r"at batch 64, 512 px failed .*at most 1\.5 GiB"):
        measure_peak("unet-mobilenetv3", 64, 512, "cpu")  # ~6 GiB unconfined
    assert time.monotonic() - started < PROBE_TIMEOUT_S  # refused by the cap, not by the timeout
