"""A sandbox's cgroup weighs as many nice-0 tasks as it has cpus, so host load cannot starve it.

Device-seconds are the sandbox's wall time: a sandbox left at the default weight (one task)
ran 5-6x slower at a host load of 8 and failed its budget. These read the real cgroup v1 files.
"""

from __future__ import annotations

import os

import pytest

from sandbox._cgroup import CGROUP_V1, PARENT, PARENT_CPU_SHARES, SHARES_PER_CPU, CgroupV1
from sandbox._policy import Limits

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (CGROUP_V1 / "cpu").is_dir(), reason="needs root on a cgroup v1 host"
)


def _limits(cpus: float) -> Limits:
    return Limits(
        cpus=cpus,
        memory_bytes=256 << 20,
        pids=64,
        workspace_bytes=1 << 20,
        file_bytes=1 << 20,
        tmp_bytes=1 << 20,
        timeout_s=5,
    )


@pytest.mark.parametrize("cpus", [0.5, 2.0])
def test_a_run_weighs_one_task_per_allotted_cpu_and_the_parent_one_per_core(cpus: float) -> None:
    group = CgroupV1.create(_limits(cpus))
    assert group is not None
    try:
        evidence = group.readback()
        assert int(str(evidence["cpu_shares"])) == int(cpus * SHARES_PER_CPU)
        assert int((CGROUP_V1 / "cpu" / PARENT / "cpu.shares").read_text()) == PARENT_CPU_SHARES
        assert PARENT_CPU_SHARES == SHARES_PER_CPU * (os.cpu_count() or 1)
    finally:
        group.remove()
