"""``sandbox verify``: start a real sandbox and read the policy back from inside (trust rule 12).

A canary is planted in a temp vault-like dir (and in the real home's vault when there is one);
the in-sandbox probe (``_inside/probe.py``, stdlib only) searches the whole visible filesystem
for it by name and by content, and reports mounts, interfaces, uid, capabilities and limits. The
host then checks every item; any deviation makes the report fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from sandbox._layout import INSIDE_TARGET
from sandbox._policy import Limits
from sandbox._records import SandboxEvent, SandboxResult, SandboxSpec, VerifyCheck, VerifyReport
from segfactory.errors import HomeError
from segfactory.gpus import host_gpus
from segfactory.home import SOURCE_ROOT, Home

if TYPE_CHECKING:
    from sandbox._base import SandboxBackend

VERIFY_TIMEOUT_S = 120.0  # the probe walks the visible filesystem
DECOY_PROBE = "/data/holdout/labels.npy"
# rw mounts allowed: the workspace, tmpfs, the hook file dir, kernel pseudo-fs, docker's /etc files, and
# docker's root-owned /sys/fs/cgroup tmpfs (its controller mounts below it are read-only)
RW_ALLOWED = (
    "/work",
    "/tmp",
    "/run/segfactory",
    "/dev",
    "/proc",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/sys/fs/cgroup",
)
EMPTY_CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


class UnshareRun(TypedDict, total=False):
    """``unshare -r true`` as the probe ran it: its exit status (None: it did not run) and stderr
    (total=False, as for ``UserNamespaces``: the checks read the probe's report defensively)."""

    exit: int | None
    stderr: str


class UserNamespaces(TypedDict, total=False):
    """Whether the probe could make a user namespace, by command and by the raw syscall."""

    unshare_r: UnshareRun
    syscall_ok: bool


class ProbeGpus(TypedDict):
    """The GPU nodes the probe saw (by minor), the driver's model of each, its CUDA_VISIBLE_DEVICES."""

    visible: list[int]
    models: dict[str, str]
    cuda_visible_devices: str | None


class ProbeReport(TypedDict):
    """The JSON object ``_inside/probe.py`` prints: what the sandboxed process could see."""

    uid: int
    euid: int
    gid: int
    status: dict[str, str]  # /proc/self/status: the Cap* lines, NoNewPrivs, Seccomp, Uid, Gid
    mountinfo: list[str]
    canary_hits: list[str]
    files_scanned: int
    interfaces: list[str]
    network: dict[str, str]  # "host:port" -> "connected" or the error's name
    docker_socket: list[str]
    rlimits: dict[str, list[int]]  # name -> [soft, hard]
    cgroup: dict[str, str]  # memory, memsw, pids limits as the cgroup files read
    decoy_opened: bool
    root_writable: bool
    cwd: str
    userns: UserNamespaces
    gpus: NotRequired[ProbeGpus]  # absent: a probe that did not look


@contextlib.contextmanager
def planted_canaries(vaults: list[Path]) -> Iterator[tuple[str, bytes]]:
    """Plant one random canary file in each vault dir; yields (name, content); removes them."""
    name = f"canary-{secrets.token_hex(8)}.bin"
    content = secrets.token_bytes(4099)  # an odd size, so few files match by size
    planted = []
    try:
        for vault in vaults:
            (vault / name).write_bytes(content)
            planted.append(vault / name)
        yield name, content
    finally:
        for path in planted:
            path.unlink(missing_ok=True)


def _mount_entry(mountinfo: list[str], path: Path) -> tuple[str, str, str]:
    """(major:minor, fs root, mount point) of the mount holding ``path`` in this mountinfo."""
    best = ("", "", "")
    for line in mountinfo:
        fields = line.split()
        point = fields[4]
        if (str(path) == point or str(path).startswith(point.rstrip("/") + "/")) and len(point) >= len(
            best[2]
        ):
            best = (fields[2], fields[3], point)
    return best


def _fs_relative(path: Path) -> tuple[str, str]:
    """``path`` as (device, path inside its filesystem), to recognise it in another namespace."""
    host = Path("/proc/self/mountinfo").read_text().splitlines()
    dev, root, point = _mount_entry(host, path)
    rel = str(path)[len(point.rstrip("/")) :] or "/"
    return dev, (root.rstrip("/") + rel) if root != "/" else rel


def check_mounts(mountinfo: list[str], protected: list[Path]) -> VerifyCheck:
    """Root read-only, rw only where allowed, and no mount exposes a protected host dir."""
    problems, table = [], []
    guards = [(_fs_relative(p), p) for p in protected]
    for line in mountinfo:
        fields = line.split()
        dev, root, point, opts = fields[2], fields[3], fields[4], fields[5].split(",")
        table.append({"target": point, "source_root": root, "rw": "rw" in opts})
        if "rw" in opts and not any(point == a or point.startswith(a + "/") for a in RW_ALLOWED):
            problems.append(f"{point} is writable")
        for (gdev, grel), host in guards:
            if dev == gdev and (grel == root or grel.startswith(root.rstrip("/") + "/")):
                problems.append(f"{point} exposes {host}")
    return VerifyCheck(name="mounts", ok=not problems, detail={"problems": problems, "table": table})


def _caps_check(status: dict[str, str]) -> VerifyCheck:
    caps = {k: status.get(k) for k in EMPTY_CAPS}
    ok = all(v is not None and int(v, 16) == 0 for v in caps.values()) and status.get("NoNewPrivs") == "1"
    return VerifyCheck(name="capabilities", ok=ok, detail={**caps, "NoNewPrivs": status.get("NoNewPrivs")})


def _limits_check(report: ProbeReport, host: dict[str, object], limits: Limits) -> VerifyCheck:
    fsize = report["rlimits"]["RLIMIT_FSIZE"][0]
    cgroup = report["cgroup"] or host
    memory, pids = str(cgroup.get("memory")), str(cgroup.get("pids"))
    ok = fsize == limits.file_bytes and memory == str(limits.memory_bytes) and pids == str(limits.pids)
    whole = host.get("kind") != "rlimit"
    if not whole:  # opted out of a cgroup: memory by RLIMIT_DATA per process, which forks multiply
        ok = False
    return VerifyCheck(
        name="limits",
        ok=ok,
        detail={
            "rlimits": report["rlimits"],
            "cgroup": cgroup,
            "whole_sandbox_memory": whole,
            "expected": limits.model_dump(),
        },
    )


def _userns_check(report: ProbeReport) -> VerifyCheck:
    """No user namespace can be made inside: `unshare -r true` fails and so does unshare(2)."""
    userns = report.get("userns") or {}
    command = userns.get("unshare_r") or {}
    ok = command.get("exit") not in (0, None) and userns.get("syscall_ok") is False
    return VerifyCheck(name="user_namespaces", ok=ok, detail=userns)


def _gpu_check(report: ProbeReport, assigned: list[int]) -> VerifyCheck:
    """The GPUs visible inside are exactly those assigned, each named by the driver; with none
    assigned, none is visible (and the detail says whether this machine has any)."""

    seen = report.get("gpus")
    if seen is None:  # a probe that did not look proves nothing
        return VerifyCheck(
            name="gpus", ok=False, detail={"assigned": assigned, "problem": "the probe did not report"}
        )
    visible = list(seen.get("visible", []))
    detail: dict[str, object] = {
        "assigned": assigned,
        "visible": visible,
        "models": seen.get("models", {}),
        "cuda_visible_devices": seen.get("cuda_visible_devices"),
    }
    if not assigned:
        here = len(host_gpus())
        detail["note"] = (
            f"no GPU was assigned ({here} on this machine)"
            if here
            else "no GPU was assigned: this machine has no NVIDIA GPU"
        )
    return VerifyCheck(name="gpus", ok=visible == sorted(assigned), detail=detail)


def evaluate(
    report: ProbeReport,
    result: SandboxResult,
    host_limits: dict[str, object],
    limits: Limits,
    protected: list[Path],
    gpus: list[int] | None = None,
) -> list[VerifyCheck]:
    """Every check, from the probe's report and the host's own observations; ``gpus`` are the
    device minors the spec assigned."""
    decoy_seen = any(e.kind == "protected_read_attempt" and e.path == DECOY_PROBE for e in result.events)
    return [
        check_mounts(report["mountinfo"], protected),
        VerifyCheck(
            name="canary",
            ok=not report["canary_hits"],
            detail={"hits": report["canary_hits"], "files_scanned": report["files_scanned"]},
        ),
        VerifyCheck(
            name="network",
            ok=report["interfaces"] == ["lo"] and "connected" not in report["network"].values(),
            detail={"interfaces": report["interfaces"], "connect": report["network"]},
        ),
        VerifyCheck(name="docker_socket", ok=not report["docker_socket"], detail=report["docker_socket"]),
        VerifyCheck(
            name="uid",
            ok=report["uid"] != 0 and report["euid"] != 0 and report["gid"] != 0,
            detail={"uid": report["uid"], "euid": report["euid"], "gid": report["gid"]},
        ),
        _caps_check(report["status"]),
        VerifyCheck(name="read_only_root", ok=not report["root_writable"], detail={"cwd": report["cwd"]}),
        _limits_check(report, host_limits, limits),
        _userns_check(report),
        VerifyCheck(
            name="decoy_detection",
            ok=report["decoy_opened"] and decoy_seen,
            detail={"opened_inside": report["decoy_opened"], "seen_by_host": decoy_seen},
        ),
        _gpu_check(report, list(gpus or [])),
    ]


def _protected_paths(home_dir: Path | None) -> tuple[list[Path], list[Path]]:
    """(dirs that must not be visible, real vaults to plant a canary in)."""

    protected, vaults = [SOURCE_ROOT], []
    with contextlib.suppress(HomeError):
        home = Home.resolve(home_dir)
        if home.exists():
            protected.append(home.root)
            if home.vault.is_dir():
                vaults.append(home.vault)
    return protected, vaults


def verify_backend(
    backend: SandboxBackend, home: Path | None = None, gpus: list[int] | None = None
) -> VerifyReport:
    """Run the probe in a real sandbox of ``backend`` and check everything it reads back.

    ``home`` (default: the resolved default home) adds its root to the protected dirs and, when
    it exists, a canary in its vault for the duration of the check. ``gpus`` (default: every
    NVIDIA GPU of this machine, none on a machine without) are assigned to the probe's sandbox,
    and the check fails unless exactly those are visible inside.
    """

    assigned = [g.minor for g in host_gpus()] if gpus is None else list(gpus)
    start = time.monotonic()
    protected, vaults = _protected_paths(home)
    scratch = Path(tempfile.mkdtemp(prefix="segfactory-verify-"))
    try:
        (scratch / "vault").mkdir()
        (scratch / "work").mkdir()
        protected.append(scratch / "vault")
        with planted_canaries([scratch / "vault", *vaults]) as (name, content):
            digest = hashlib.sha256(content).hexdigest()
            command = [
                "python",
                "-I",
                f"{INSIDE_TARGET}/probe.py",
                name,
                str(len(content)),
                digest,
                DECOY_PROBE,
            ]
            spec = SandboxSpec(
                command=command, workspace=scratch / "work", timeout_s=VERIFY_TIMEOUT_S, gpus=assigned
            )
            result = backend.run(spec)
        checks = _checks_from(result, backend, protected, assigned)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return VerifyReport(
        backend=backend.name,
        ok=all(c.ok for c in checks),
        checks=checks,
        duration_s=round(time.monotonic() - start, 3),
    )


def _checks_from(
    result: SandboxResult, backend: SandboxBackend, protected: list[Path], gpus: list[int]
) -> list[VerifyCheck]:
    try:
        report: ProbeReport = json.loads(result.stdout.data)
    except ValueError:
        detail = {
            "exit_code": result.exit_code,
            "stderr": result.stderr.data[-2000:].decode(errors="replace"),
        }
        return [VerifyCheck(name="probe", ok=False, detail=detail)]
    gaps = [e.model_dump() for e in result.events if e.kind == "monitoring_gap"]
    checks = evaluate(report, result, backend.limit_evidence(), backend.policy.defaults, protected, gpus)
    return [*checks, VerifyCheck(name="monitoring", ok=not gaps, detail=gaps)]


def events_summary(events: list[SandboxEvent]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        counts[event.kind] = counts.get(event.kind, 0) + 1
    return counts


__all__ = ["events_summary", "verify_backend"]
