"""The bwrap namespace both confined children run in: the ONNX intake and the scorer.

``confined_command(child, packages, args)`` starts ``python -I -B`` on one self-contained child
file inside ``bwrap --unshare-all`` with only the system directories, the Python runtime and the
named site packages bound read-only: no vault, no home, no network, no writable path but a
private ``/tmp``. ``limit_child`` is the rlimit hook run between fork and exec.

Packages are located with ``importlib.util.find_spec``, which never imports them: the process
that holds the vault must not load the code that parses or runs a model (protobuf, onnx,
onnxruntime), since that code is exactly what attacker bytes target.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import sys
from pathlib import Path

CPU_SECONDS = 600  # CPU time for one confined child; past this: the kernel kills it
ADDRESS_SPACE_BYTES = 8 * 1024**3  # virtual memory of the child; past this: allocation fails
CHILD_PATH = "/sf/child.py"
SITE = "/sf/site"


class ConfinementError(Exception):
    """The confined child cannot be started (bwrap missing, a runtime package not found)."""


def _package_paths(name: str) -> list[Path]:
    """Where an installed top-level package (or single-module distribution) lives, unimported."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ConfinementError(f"package {name!r} is not installed; the confined child needs it")
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    if spec.origin is None:
        raise ConfinementError(f"package {name!r} has no location on disk")
    return [Path(spec.origin)]


def _system_binds() -> list[str]:
    binds: list[str] = []
    for system_dir in ("/usr", "/lib", "/lib64", "/bin"):
        if Path(system_dir).is_symlink():
            binds += ["--symlink", os.readlink(system_dir), system_dir]
        elif Path(system_dir).is_dir():
            binds += ["--ro-bind", system_dir, system_dir]
    return binds


def confined_command(
    child: str, packages: tuple[str, ...], args: list[str], devices: list[str] | None = None
) -> list[str]:
    """The bwrap invocation running ``child`` (a file path) with ``packages`` importable;
    ``devices`` are extra bwrap arguments binding device nodes (a GPU's, for the CUDA scorer)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ConfinementError(
            "bubblewrap (bwrap) is not installed; the gate never parses or scores unconfined"
        )
    base = Path(sys.base_prefix).resolve()
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    # --disable-userns: code in the child cannot make a nested user namespace (and with it the
    # capabilities that reach kernel surface the confinement otherwise keeps out of reach)
    cmd = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--assert-userns-disabled",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *_system_binds(),
    ]
    cmd += [
        "--ro-bind",
        str(base),
        str(base),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *(devices or []),
        "--tmpfs",
        "/tmp",
    ]
    for package in packages:
        for path in _package_paths(package):
            cmd += ["--ro-bind", str(path), f"{SITE}/{path.name}"]
        libs = _package_paths(package)[0].parent / f"{package}.libs"  # vendored shared libraries (numpy)
        if libs.is_dir():
            cmd += ["--ro-bind", str(libs), f"{SITE}/{libs.name}"]
    cmd += ["--ro-bind", child, CHILD_PATH, "--chdir", "/tmp"]
    return [*cmd, str(python.resolve()), "-I", "-B", "-c", _BOOT, *args]


_BOOT = (
    f"import sys, runpy; sys.path.insert(0, '{SITE}'); "
    f"sys.argv = ['{CHILD_PATH}'] + sys.argv[1:]; runpy.run_path('{CHILD_PATH}', run_name='__main__')"
)


def limit_child() -> None:  # runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def limit_cuda_child() -> None:  # runs in the child between fork and exec
    """``limit_child`` for a child on CUDA: the CUDA driver reserves far more virtual address space
    than ``ADDRESS_SPACE_BYTES`` at start, so RLIMIT_AS cannot bound it; RLIMIT_DATA (private
    writable memory) bounds its host memory instead. CPU time, file writes and cores as always."""
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_DATA, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def child_env(threads: int) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[key] = str(threads)
    return env
