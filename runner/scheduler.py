"""The scheduler: a measured memory profile, memory estimates, admission control, OOM retry.

``profile_device`` measures peak memory against batch size for each model preset (on CUDA with
``torch.cuda.max_memory_allocated``; on the CPU as the peak RSS of one probe process per
measurement) and ``save_profile`` keeps it in the home as ``device_profile.json``.
``MemoryEstimator`` turns a training config into bytes (a linear fit per preset, scaled by image
area; a probe of its own when the preset was not profiled) and caches the answer by config hash
in ``memory_estimates.json``. ``Admission`` lets a ticket start only when its estimate fits in
free device memory less ``MEMORY_RESERVE_BYTES`` for other tenants, and at most ``concurrency``
at a time. ``Scheduler.auto_concurrency`` sizes that bound when nobody chose it (``run
--concurrency auto``): on the CPU as many tickets as the cores allow, one thread each, and the
free memory holds; on CUDA as many as fit in the GPUs' free memory. ``shrink_for_oom`` gives the
retry config after an OOM: half the batch, double the gradient accumulation, so the effective
batch is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from segfactory import gpus as host_devices
from segfactory.errors import DataError, LimitExceeded, PolicyError
from segfactory.files import write_atomic
from segfactory.home import SOURCE_ROOT, Home
from segfactory.records import MAX_AUTO_CONCURRENCY, ConcurrencyPlan, canonical_json
from vision.tiling import DEV_BATCH, TILE_PX, per_batch

if TYPE_CHECKING:
    from vision.config import TrainConfig

PROFILE_FILE = "device_profile.json"  # in the home
ESTIMATES_FILE = "memory_estimates.json"  # in the home: config hash -> bytes
MEMORY_RESERVE_BYTES = 1 * 1024**3  # kept free for other tenants of the device
# Kept free on the gate's scoring GPU (the host's first, gate._provider) on top of the reserve:
# a verdict scored while tickets train must find its memory, or a rival's model would be INVALID
GATE_GPU_RESERVE_BYTES = 2 * 1024**3
ESTIMATE_SAFETY = 1.2  # an estimate is the fitted peak times this factor
MAX_OOM_RETRIES = 3  # halvings after an OOM; past this the ticket fails with reason "oom"
DEFAULT_CONCURRENCY = 1  # tickets running at once on one device
AUTO_CONCURRENCY = "auto"  # a concurrency nobody chose: Scheduler.auto_concurrency sizes it
# MAX_AUTO_CONCURRENCY (segfactory.records) caps what auto trains at once, and the CLI's
# --concurrency: past a handful, one host's tickets would spend more on sandboxes and data copies
# than they gain; a person may still ask for fewer.
PROBE_TIMEOUT_S = 300.0  # one probe process; past this: killed, the profile fails
# A probe builds the model of a config a proposer may have written (a changed decoder width) on the
# host, outside any sandbox: its private memory is capped (RLIMIT_DATA) at this share of the host's
# physical memory, so a config that would exhaust the host fails its probe and the ticket is refused.
PROBE_MEMORY_SHARE = 0.5
ADMISSION_POLL_S = 0.5  # how often a waiting ticket re-reads free memory
DEFAULT_BATCH_SIZES = (4, 16)  # batch sizes a profile measures per preset
OOM_MARKERS = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "MemoryError",
    "DefaultCPUAllocator: can't allocate memory",
    "Memory allocation still failed",
)  # in the worker's stderr tail

DeviceKind = Literal["cpu", "cuda"]  # segfactory.records.ConcurrencyPlan.device


class Measurement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str
    batch_size: int = Field(gt=0)
    image_size: int = Field(gt=0)
    peak_bytes: int = Field(gt=0)
    seconds: float = Field(ge=0)  # wall time of the measurement


class DeviceProfile(BaseModel):
    """Peak training memory against batch size, per preset, on one device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    device: DeviceKind
    device_name: str
    total_bytes: int = Field(gt=0)
    created: float
    torch_version: str
    measurements: list[Measurement]

    def fit(self, preset: str) -> tuple[float, float, int] | None:
        """(intercept bytes, bytes per image, image size) by least squares; None if unprofiled."""
        points = [m for m in self.measurements if m.preset == preset]
        if not points:
            return None
        size = points[0].image_size
        xs = [float(m.batch_size) for m in points]
        ys = [float(m.peak_bytes) for m in points]
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
        slope = max(slope, 0.0)
        return mean_y - slope * mean_x, slope, size

    def estimate(self, preset: str, batch_size: int, image_size: int) -> int | None:
        """Peak bytes for one training step; per-image memory scales with image area."""
        fitted = self.fit(preset)
        if fitted is None:
            return None
        intercept, slope, size = fitted
        per_image = slope * (image_size / size) ** 2
        return int(ESTIMATE_SAFETY * (intercept + per_image * batch_size))


def host_cores() -> int:
    """Cores this process may run on (its CPU affinity, which a cpuset or ``taskset`` narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call on this platform: every core the OS reports
        return max(1, os.cpu_count() or 1)


class SchedulerSettings(BaseModel):
    """How the scheduler shares one device; every field is validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=64)
    reserve_bytes: int = Field(default=MEMORY_RESERVE_BYTES, ge=0)
    gate_reserve_bytes: int = Field(default=GATE_GPU_RESERVE_BYTES, ge=0)  # on the gate's GPU only
    max_oom_retries: int = Field(default=MAX_OOM_RETRIES, ge=0, le=10)
    memory_limit_bytes: int | None = Field(default=None, gt=0)  # per ticket; None: the sandbox policy's
    admission_wait_s: float = Field(default=3600.0, gt=0)  # how long a ticket may wait for memory


# -- measuring ------------------------------------------------------------------------------------


def detect_device() -> DeviceKind:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_total_bytes(device: DeviceKind) -> tuple[str, int]:
    """(name, total memory) of the device."""
    if device == "cuda":
        import torch

        props = torch.cuda.get_device_properties(0)
        return str(props.name), int(props.total_memory)
    import platform

    import psutil

    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)", int(psutil.virtual_memory().total)


def measure_peak(
    preset: str, batch_size: int, image_size: int, device: DeviceKind, decoder_width: int | None = None
) -> Measurement:
    """Run one probe process and read its peak memory (RSS via wait4 on CPU; CUDA allocator stats)."""
    command = [
        sys.executable,
        "-m",
        "runner._probe",
        "--preset",
        preset,
        "--batch-size",
        str(batch_size),
        "--image-size",
        str(image_size),
        "--device",
        device,
        *(["--decoder-width", str(decoder_width)] if decoder_width is not None else []),
    ]
    start = time.monotonic()
    limit = probe_memory_limit()
    code, stdout, stderr, rusage = _run_measured(command, limit)
    if code != 0:
        raise DataError(
            f"memory probe for {preset} at batch {batch_size}, {image_size} px failed (exit {code}; a "
            f"probe may use at most {limit / 1024**3:.1f} GiB): {stderr.decode(errors='replace')[-400:]}"
        )
    if device == "cuda":
        peak = int(json.loads(stdout.decode().strip().splitlines()[-1])["peak_bytes"])
    else:
        peak = int(rusage.ru_maxrss) * 1024  # Linux reports kilobytes
    return Measurement(
        preset=preset,
        batch_size=batch_size,
        image_size=image_size,
        peak_bytes=peak,
        seconds=round(time.monotonic() - start, 3),
    )


def probe_memory_limit() -> int:
    """Bytes of private memory one probe process may map (``PROBE_MEMORY_SHARE`` of the host's)."""
    return int(PROBE_MEMORY_SHARE * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _limit_memory(limit: int) -> None:  # runs in the probe between fork and exec
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_measured(command: list[str], memory_limit: int) -> tuple[int, bytes, bytes, Any]:
    """Run ``command`` with its private memory capped at ``memory_limit`` bytes, and reap it with
    ``os.wait4`` so its own peak RSS is known."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SOURCE_ROOT)}
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=err,
            cwd=SOURCE_ROOT,
            env=env,
            preexec_fn=partial(_limit_memory, memory_limit),
        )

        def expire() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(PROBE_TIMEOUT_S, expire)
        timer.start()
        try:
            _, status, rusage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if timed_out.is_set():
            raise LimitExceeded(f"memory probe {command[3:]} ran past PROBE_TIMEOUT_S={PROBE_TIMEOUT_S:g}s")
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), rusage


def profile_device(
    presets: list[str], batch_sizes: list[int], image_size: int, device: DeviceKind | None = None
) -> DeviceProfile:
    """Measure every (preset, batch size) pair; one probe process each."""
    import torch

    kind = device or detect_device()
    name, total = device_total_bytes(kind)
    measurements = [measure_peak(p, b, image_size, kind) for p in presets for b in sorted(set(batch_sizes))]
    return DeviceProfile(
        device=kind,
        device_name=name,
        total_bytes=total,
        created=time.time(),
        torch_version=str(torch.__version__),
        measurements=measurements,
    )


def save_profile(home: Home, profile: DeviceProfile) -> Path:
    home.root.mkdir(parents=True, exist_ok=True)
    path = home.root / PROFILE_FILE
    write_atomic(path, profile.model_dump_json(indent=2) + "\n")
    return path


def load_profile(home: Home) -> DeviceProfile | None:
    """The stored profile, or None when ``segfactory device profile`` has not run."""
    path = home.root / PROFILE_FILE
    if not path.is_file():
        return None
    return DeviceProfile.model_validate_json(path.read_text())


# -- estimating -----------------------------------------------------------------------------------


def _shape_key(preset: str, batch_size: int, image_size: int, decoder_width: int | None) -> str:
    """The config hash estimates are cached by: only the fields that move peak memory."""
    body = {
        "preset": preset,
        "batch_size": batch_size,
        "image_size": image_size,
        "decoder_width": decoder_width,
    }
    return hashlib.sha256(canonical_json(body)).hexdigest()


class MemoryEstimator:
    """Bytes a training config needs at its peak; cached by config hash in the home.

    From the device profile when the preset was profiled (and the decoder width is the
    preset's); otherwise by a probe process of its own (seconds, once per config hash).
    """

    def __init__(self, home: Home, profile: DeviceProfile | None, device: DeviceKind = "cpu") -> None:
        self.path = home.root / ESTIMATES_FILE
        self.profile = profile
        self.device: DeviceKind = profile.device if profile else device
        self._lock = threading.Lock()
        self.hits = 0  # estimates answered from the cache
        self.probes = 0  # estimates that needed a probe process

    def estimate(
        self, preset: str, batch_size: int, image_size: int, decoder_width: int | None = None
    ) -> int:
        key = _shape_key(preset, batch_size, image_size, decoder_width)
        with self._lock:
            cache = self._read()
            if key in cache:
                self.hits += 1
                return int(cache[key])
            value = self._compute(preset, batch_size, image_size, decoder_width)
            cache[key] = value
            self._write(cache)
            return value

    def _compute(self, preset: str, batch_size: int, image_size: int, decoder_width: int | None) -> int:
        if self.profile is not None and decoder_width is None:
            value = self.profile.estimate(preset, batch_size, image_size)
            if value is not None:
                return value
        self.probes += 1
        measured = measure_peak(preset, batch_size, image_size, self.device, decoder_width)
        return int(ESTIMATE_SAFETY * measured.peak_bytes)

    def _read(self) -> dict[str, int]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except json.JSONDecodeError:
            return {}  # a torn cache is only a cache: re-estimate
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _write(self, cache: dict[str, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(cache, sort_keys=True))


# -- admission ------------------------------------------------------------------------------------


def free_memory(device: DeviceKind) -> int:
    """Free device memory now: ``torch.cuda.mem_get_info`` on CUDA, available RAM on the CPU."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    import psutil

    return int(psutil.virtual_memory().available)


def gpu_free_bytes(uuid: str) -> int:
    """Free memory of one GPU, named by UUID, from ``nvidia-smi`` (CUDA's own device numbering
    need not follow the driver's minors, so the host process does not ask torch)."""
    proc = subprocess.run(
        ["nvidia-smi", f"--id={uuid}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    try:
        return int(float(proc.stdout.strip().splitlines()[0])) * 2**20  # MiB
    except (IndexError, ValueError):
        raise LimitExceeded(
            f"cannot read the free memory of GPU {uuid}: {proc.stderr.strip()[:200]}"
        ) from None


class Admission:
    """Admits a ticket when its estimate fits in free memory less the reserve; bounded concurrency.

    Estimates of tickets already admitted count against free memory as read at admission, so
    admission errs toward waiting. ``admit`` raises LimitExceeded when the estimate cannot fit
    even on an idle device (total memory less the reserve), or when ``wait_s`` passes first.
    """

    def __init__(
        self,
        device: DeviceKind,
        total_bytes: int,
        settings: SchedulerSettings | None = None,
        free: Callable[[], int] | None = None,
        *,
        gate_gpu: bool = False,
    ) -> None:
        self.settings = settings or SchedulerSettings()
        # the gate scores on this GPU: its reserve is kept free on top of the tenants' reserve
        self.reserve_bytes = self.settings.reserve_bytes + (
            self.settings.gate_reserve_bytes if gate_gpu else 0
        )
        self.total_bytes = total_bytes
        self._free = free or (lambda: free_memory(device))
        self._slots = threading.Semaphore(self.settings.concurrency)
        self._cond = threading.Condition()
        self._in_flight = 0  # bytes of estimates admitted and not yet released

    @contextmanager
    def admit(self, estimate_bytes: int, wait_s: float = 3600.0) -> Iterator[None]:
        capacity = self.capacity()
        if estimate_bytes > capacity:
            raise LimitExceeded(
                f"memory estimate {estimate_bytes / 2**20:.0f} MiB exceeds the device's "
                f"{capacity / 2**20:.0f} MiB (total less the reserve of "
                f"{self.reserve_bytes / 2**20:.0f} MiB); lower batch_size"
            )
        if not self._slots.acquire(timeout=wait_s):
            raise LimitExceeded(
                f"no free ticket slot (concurrency={self.settings.concurrency}) within {wait_s:g}s"
            )
        try:
            self._reserve(estimate_bytes, wait_s)
            try:
                yield
            finally:
                with self._cond:
                    self._in_flight -= estimate_bytes
                    self._cond.notify_all()
        finally:
            self._slots.release()

    def fits(self, estimate_bytes: int) -> bool:
        return estimate_bytes <= self.headroom()

    def capacity(self) -> int:
        """What an idle device holds for tickets: its total less the reserve."""
        return self.total_bytes - self.reserve_bytes

    def headroom(self) -> int:
        """Free memory now, less the reserve and the estimates admitted and not yet released."""
        return self._free() - self.reserve_bytes - self._in_flight

    def try_reserve(self, estimate_bytes: int) -> bool:
        """Count ``estimate_bytes`` as in flight if it fits now; no wait, no ticket slot (the
        scheduler that spreads tickets over several GPUs holds the slots)."""
        with self._cond:
            if not self.fits(estimate_bytes):
                return False
            self._in_flight += estimate_bytes
            return True

    def release(self, estimate_bytes: int) -> None:
        with self._cond:
            self._in_flight -= estimate_bytes
            self._cond.notify_all()

    def _reserve(self, estimate_bytes: int, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        with self._cond:
            while not self.fits(estimate_bytes):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LimitExceeded(
                        f"memory estimate {estimate_bytes / 2**20:.0f} MiB did not fit in free "
                        f"memory less the reserve within {wait_s:g}s"
                    )
                self._cond.wait(min(ADMISSION_POLL_S, left))
            self._in_flight += estimate_bytes


# -- OOM retry ------------------------------------------------------------------------------------


def is_oom(exit_code: int, oom_killed: bool, stderr_tail: str) -> bool:
    """An out-of-memory end: the kernel's kill (137 / oom_killed) or an allocator error."""
    if oom_killed or exit_code in (137, -9):
        return True
    return exit_code != 0 and any(marker in stderr_tail for marker in OOM_MARKERS)


def shrink_for_oom(config: TrainConfig) -> TrainConfig | None:
    """Half the batch, double the accumulation (same effective batch); None at batch 1."""
    batch = config.batch_size
    if batch <= 1:
        return None
    return config.model_copy(update={"batch_size": batch // 2, "grad_accum": config.grad_accum * 2})


# -- the scheduler --------------------------------------------------------------------------------


class Scheduler:
    """Estimates, admits and sizes tickets on the host's device (see the module docstring).

    On the CPU, and on a host with one GPU, ``admission`` admits every ticket. With several GPUs
    each GPU has an ``Admission`` of its own (``gpu_admissions``: device minor -> admission, read
    from the driver when not given) and a ticket goes to the GPU with the most headroom that fits
    it, so concurrent tickets spread over the GPUs; ``settings.concurrency`` still bounds the
    tickets running at once on the host. The memory profile was measured on the first GPU and
    stands for all of them; each GPU's own free memory is read at admission."""

    def __init__(
        self,
        estimator: MemoryEstimator,
        admission: Admission,
        settings: SchedulerSettings,
        gpu_admissions: dict[int, Admission] | None = None,
    ) -> None:
        self.estimator = estimator
        self.admission = admission
        self.settings = settings
        self._gpu_admissions = gpu_admissions
        self._slots = threading.Semaphore(settings.concurrency)
        self._spread = threading.Lock()  # one GPU choice at a time: two tickets never race for one

    @classmethod
    def for_home(cls, home: Home, settings: SchedulerSettings | None = None) -> Scheduler:
        """The scheduler for the home's stored device profile (the CPU's RAM when none is stored)."""
        settings = settings or SchedulerSettings()
        profile = load_profile(home)
        device: DeviceKind = profile.device if profile else "cpu"
        total = profile.total_bytes if profile else device_total_bytes("cpu")[1]
        # on CUDA the one admission is a one-GPU host's, whose GPU the gate scores on
        admission = Admission(device, total, settings, gate_gpu=device == "cuda")
        return cls(MemoryEstimator(home, profile, device), admission, settings)

    def estimate(self, config: dict[str, Any], image_size: int, data_bytes: int = 0) -> int:
        """Peak bytes of a worker training a validated config on images of ``image_size``: the
        larger of a training step on its crops and the dev scoring of whole images (or their
        tiles, ``vision.tiling``), plus ``data_bytes`` of the dataset it holds in memory. The
        scoring is bounded by a training step at the scoring batch and side (it keeps no
        gradients, so the bound errs toward waiting)."""

        model = config.get("model", {})
        name, width = str(model.get("name")), model.get("decoder_width")
        side = int((config.get("sampling") or {}).get("crop") or image_size)
        training = self.estimator.estimate(name, int(config["batch_size"]), side, width)
        scored = min(image_size, TILE_PX)
        scoring = self.estimator.estimate(name, per_batch(scored, scored, DEV_BATCH), scored, width)
        return max(training, scoring) + int(data_bytes)

    def admit(self, estimate_bytes: int) -> AbstractContextManager[list[int]]:
        """Wait until a ticket of ``estimate_bytes`` may start; yields the GPUs (device minors)
        its sandbox gets: none on the CPU, one on CUDA."""
        return self._admit(estimate_bytes)

    @contextmanager
    def _admit(self, estimate_bytes: int) -> Iterator[list[int]]:
        if self.estimator.device != "cuda":
            with self.admission.admit(estimate_bytes, self.settings.admission_wait_s):
                yield []
            return
        admissions = self._per_gpu()
        if len(admissions) == 1:
            with self.admission.admit(estimate_bytes, self.settings.admission_wait_s):
                yield list(admissions)
            return
        with self._spread_over(admissions, estimate_bytes) as minor:
            yield [minor]

    @contextmanager
    def _spread_over(self, admissions: dict[int, Admission], estimate_bytes: int) -> Iterator[int]:
        wait_s = self.settings.admission_wait_s
        capacity = max(a.capacity() for a in admissions.values())
        if estimate_bytes > capacity:
            raise LimitExceeded(
                f"memory estimate {estimate_bytes / 2**20:.0f} MiB exceeds every GPU's "
                f"{capacity / 2**20:.0f} MiB (total less the reserve); lower batch_size"
            )
        if not self._slots.acquire(timeout=wait_s):
            raise LimitExceeded(
                f"no free ticket slot (concurrency={self.settings.concurrency}) within {wait_s:g}s"
            )
        try:
            deadline = time.monotonic() + wait_s
            while True:
                with self._spread:
                    by_headroom = sorted(admissions.items(), key=lambda item: (-item[1].headroom(), item[0]))
                    chosen = next((minor for minor, a in by_headroom if a.try_reserve(estimate_bytes)), None)
                if chosen is not None:
                    break
                if time.monotonic() >= deadline:
                    raise LimitExceeded(
                        f"memory estimate {estimate_bytes / 2**20:.0f} MiB did not fit in the free "
                        f"memory of any of {len(admissions)} GPUs within {wait_s:g}s"
                    )
                time.sleep(ADMISSION_POLL_S)
            try:
                yield chosen
            finally:
                admissions[chosen].release(estimate_bytes)
        finally:
            self._slots.release()

    def _per_gpu(self) -> dict[int, Admission]:
        if self._gpu_admissions is None:
            total = self.admission.total_bytes
            gpus = self._host_gpus()  # the gate scores on the first (gate._provider.machine_scoring)
            self._gpu_admissions = {
                gpu.minor: Admission(
                    "cuda", total, self.settings, partial(gpu_free_bytes, gpu.uuid), gate_gpu=gpu is gpus[0]
                )
                for gpu in gpus
            }
        return self._gpu_admissions

    def cpu_share(self) -> int | None:
        """Cores each ticket gets when several run at once on the CPU (the host's cores split
        evenly, at least one); None when one runs at a time or the device is a GPU, where the
        sandbox policy's own CPU limit stands."""
        if self.estimator.device != "cpu" or self.settings.concurrency <= 1:
            return None
        return max(1, host_cores() // self.settings.concurrency)

    def auto_concurrency(self, estimate_bytes: int) -> ConcurrencyPlan:
        """How many tickets of ``estimate_bytes`` to train at once when nobody chose: on the CPU the
        fewer of the cores (one thread a ticket, ``cpu_share``) and the tickets the free memory
        less the reserve holds; on CUDA the tickets each GPU's free memory less the reserve holds,
        summed (packed by measured memory; admission still checks each ticket as it starts). At
        least 1, at most ``MAX_AUTO_CONCURRENCY``."""
        estimate = max(1, int(estimate_bytes))
        mib = f"{estimate / 2**20:.0f} MiB"
        if self.estimator.device == "cuda":
            gpus = self._per_gpu()
            fits = sum(max(0, a.headroom()) // estimate for a in gpus.values())
            tickets = max(1, min(MAX_AUTO_CONCURRENCY, fits))
            basis = (
                f"{fits} tickets of {mib} fit in the free memory of {len(gpus)} GPU(s) less the reserve "
                f"(and {self.settings.gate_reserve_bytes / 2**30:g} GiB more on the gate's GPU)"
            )
            return ConcurrencyPlan(
                tickets=tickets,
                device="cuda",
                cores=None,
                fit_by_memory=fits,
                estimate_bytes=estimate,
                basis=basis,
            )
        cores = host_cores()
        fits = max(0, self.admission.headroom()) // estimate
        tickets = max(1, min(MAX_AUTO_CONCURRENCY, cores, fits))
        basis = (
            f"{cores} cores, one thread a ticket; {fits} tickets of {mib} fit in free memory less the "
            f"{self.settings.reserve_bytes / 2**30:g} GiB reserve"
        )
        return ConcurrencyPlan(
            tickets=tickets,
            device="cpu",
            cores=cores,
            fit_by_memory=fits,
            estimate_bytes=estimate,
            basis=basis,
        )

    def device_gpus(self) -> list[int]:
        """The GPUs (device minors) this scheduler gives tickets: none on the CPU; on CUDA every
        GPU of this machine (one ticket's sandbox gets one of them, see ``admit``)."""
        if self.estimator.device != "cuda":
            return []
        return list(self._per_gpu())

    def _host_gpus(self) -> list[Any]:
        gpus = host_devices.host_gpus()
        if not gpus:
            raise PolicyError(
                "the home's device profile is for CUDA but this machine has no NVIDIA GPU; "
                "measure it again with `segfactory device profile`"
            )
        return gpus
