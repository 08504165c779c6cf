"""``scripts/check-disk.sh``: `make` refuses, in one line, to start a venv install the disk cannot hold;
``scripts/gpu-check.sh`` parses and stops at once on a machine without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check-disk.sh"


def _check(venv: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "SEGFACTORY_SKIP_DISK_CHECK"} | env
    return subprocess.run(
        ["bash", str(SCRIPT), str(venv), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment,
        check=False,
    )


def test_a_disk_too_small_for_the_venv_fails_with_one_clear_line(tmp_path: Path) -> None:
    proc = _check(tmp_path / ".venv", "1000000")  # 1 PB: more than any disk here has
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == len({_filesystem(tmp_path), _filesystem(Path(os.environ.get("TMPDIR", "/tmp")))})
    first = lines[0]
    assert "MB free" in first and "needs about 1000000 GB" in first and "SEGFACTORY_SKIP_DISK_CHECK" in first


def test_enough_space_passes_silently(tmp_path: Path) -> None:
    proc = _check(tmp_path / ".venv", "0")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_the_check_can_be_skipped(tmp_path: Path) -> None:
    proc = _check(tmp_path / ".venv", "1000000", SEGFACTORY_SKIP_DISK_CHECK="1")
    assert proc.returncode == 0


def _filesystem(path: Path) -> int:
    return os.stat(path).st_dev


GPU_CHECK = SCRIPT.parent / "gpu-check.sh"


def test_the_gpu_check_parses_and_on_a_machine_without_a_gpu_says_so_before_doing_anything(
    tmp_path: Path,
) -> None:
    assert subprocess.run(["bash", "-n", str(GPU_CHECK)], capture_output=True, timeout=30).returncode == 0
    if Path("/proc/driver/nvidia/gpus").is_dir():
        return  # a GPU machine: the check itself is what scripts/gpu-check.sh is for
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(GPU_CHECK)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "GPU_CHECK_OUT": str(out)},
        check=False,
    )
    assert proc.returncode == 2 and "no NVIDIA driver on this machine" in proc.stderr
    assert not (out / "setup.log").exists()  # nothing was started


PICK_ORT = SCRIPT.parent / "pick-onnxruntime.sh"


def _pick(tmp_path: Path, gpus: Path) -> subprocess.CompletedProcess[str]:
    """The onnxruntime pick, dry, against this test's interpreter (it has the CPU build)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return subprocess.run(
        ["bash", str(PICK_ORT), str(venv), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SEGFACTORY_NVIDIA_GPUS": str(gpus)},
        check=False,
    )


def test_without_an_nvidia_gpu_set_up_keeps_the_cpu_onnxruntime(tmp_path: Path) -> None:
    for gpus in (tmp_path / "absent", tmp_path / "empty"):
        if gpus.name == "empty":
            gpus.mkdir()
        proc = _pick(tmp_path, gpus)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_with_an_nvidia_gpu_set_up_swaps_in_onnxruntime_gpu_at_the_same_version(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    (gpus / "0000:01:00.0").mkdir(parents=True)  # the driver lists one folder per GPU
    proc = _pick(tmp_path, gpus)
    assert proc.returncode == 0, proc.stderr
    version = metadata.version("onnxruntime")
    pip = tmp_path / "venv" / "bin" / "pip"
    # both builds go first: they share the `onnxruntime` module, and removing one breaks the other
    assert proc.stdout.splitlines() == [
        f"{pip} uninstall -q -y onnxruntime onnxruntime-gpu",
        f"{pip} install -q onnxruntime-gpu=={version}",
    ]
    assert "onnxruntime-gpu" in proc.stderr


def test_make_setup_runs_the_onnxruntime_pick_after_the_python_dependencies() -> None:
    root = SCRIPT.parents[1]
    proc = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = proc.stdout.splitlines()
    deps = next(i for i, line in enumerate(lines) if "pip install -q -e" in line)
    pick = next(i for i, line in enumerate(lines) if "scripts/pick-onnxruntime.sh .venv" in line)
    assert deps < pick < next(i for i, line in enumerate(lines) if line.startswith("touch"))
