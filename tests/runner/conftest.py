"""Fixtures for the runner tests: a home with an approved tiny dataset version, a real audit log,
and a launcher that runs the worker stand-in as a host process under a real memory rlimit."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit import AuditLog, MemoryAnchorStore
from runner import LaunchRequest, LaunchResult
from runner.scheduler import (
    Admission,
    DeviceProfile,
    Measurement,
    MemoryEstimator,
    Scheduler,
    SchedulerSettings,
)
from segfactory.home import Home
from synthetic.splits import write_split
from synthetic.versions import DatasetVersion, create_version
from tests.vision._data import draw

STANDIN = Path(__file__).with_name("_standin.py")
BASE_CONFIG = {"model": {"name": "unet-mobilenetv3"}, "epochs": 1, "batch_size": 8, "threads": 1}


@pytest.fixture
def home(tmp_home: Path) -> Home:
    tmp_home.mkdir(parents=True)
    return Home(tmp_home)


@pytest.fixture
def dataset(home: Home, tmp_path: Path) -> DatasetVersion:
    """An approved version ``discs/v1``: 24 train and 12 dev images of 32x32 pixels."""
    for name, n, seed in (("train", 24, 0), ("dev", 12, 1)):
        images, masks, meta, defects = draw(n, 32, seed)
        write_split(tmp_path / "src" / name, images, masks, meta, defects, {"generator": "tests.discs"})
    return create_version(
        home.root, "discs", {s: tmp_path / "src" / s for s in ("train", "dev")}, approve_it=True
    )


@pytest.fixture
def audit_log(home: Home) -> Iterator[AuditLog]:
    with AuditLog(home, MemoryAnchorStore()) as log:
        yield log


class StandinLauncher:
    """Runs ``_standin.py`` on the host under RLIMIT_DATA; ignores the sandbox command it is given.

    Test-only: it stands in for the sandbox where a test is about the runner's own logic (OOM
    retry, copy-out, evidence), and the memory limit it applies is a real kernel limit.
    """

    name = "standin"

    def __init__(
        self,
        mode: str = "honest",
        memory_bytes: int | None = None,
        target: str = "/etc/passwd",
        mib_per_sample: int = 32,
    ) -> None:
        self.mode, self.memory_bytes, self.target = mode, memory_bytes, target
        self.mib_per_sample = mib_per_sample
        self.requests: list[LaunchRequest] = []

    def launch(self, request: LaunchRequest) -> LaunchResult:
        self.requests.append(request)
        limit = request.memory_bytes or self.memory_bytes

        def confine() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

        start = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                str(STANDIN),
                "--work",
                str(request.workspace),
                "--mode",
                self.mode,
                "--target",
                self.target,
                "--mib-per-sample",
                str(self.mib_per_sample),
            ],
            capture_output=True,
            timeout=request.timeout_s,
            preexec_fn=confine,
        )
        return LaunchResult(
            exit_code=proc.returncode,
            duration_s=time.monotonic() - start,
            stdout_tail=proc.stdout.decode()[-4000:],
            stderr_tail=proc.stderr.decode()[-4000:],
        )


PROFILED = DeviceProfile(
    device="cpu",
    device_name="test cpu",
    total_bytes=64 * 2**30,
    created=0.0,
    torch_version="n/a",
    measurements=[
        Measurement(preset="unet-mobilenetv3", batch_size=b, image_size=32, peak_bytes=p, seconds=0.0)
        for b, p in ((4, 600 * 2**20), (16, 700 * 2**20))
    ],
)  # a profile as `device profile` stores it (numbers of the order measured on this machine)


@pytest.fixture
def scheduler(home: Home) -> Scheduler:
    settings = SchedulerSettings(reserve_bytes=0)
    return Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )
