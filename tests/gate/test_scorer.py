"""The confined scorer: right numbers, validated outputs, and no view of the vault."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gate import scorer
from gate.intake import inspect_bytes
from gate.scorer import ScoringError, score_checked, score_model
from tests.gate import models

pytestmark = pytest.mark.bwrap


def test_scores_match_the_graph(tmp_path: Path) -> None:
    images = np.random.default_rng(0).random((70, 16, 16), dtype=np.float32)  # > one batch
    prob = score_model(models.save(models.threshold_model(), tmp_path / "m.onnx"), images)
    expected = 1 / (1 + np.exp(-20 * (images - 0.5)))
    assert prob.shape == (70, 1, 16, 16)
    np.testing.assert_allclose(prob[:, 0], expected, atol=1e-5)


def test_wrong_output_shape_is_refused() -> None:
    checked = inspect_bytes(models.wrong_output_shape_model().SerializeToString())
    with pytest.raises(ScoringError, match="output shape"):
        score_checked(checked, np.zeros((4, 16, 16), np.float32))


def test_output_outside_unit_range_is_refused() -> None:
    model = models.threshold_model()
    model.graph.node[-1].op_type = "Identity"  # prob = 20 * (x - 0.5): outside [0, 1]
    checked = inspect_bytes(model.SerializeToString())
    with pytest.raises(ScoringError, match="outside"):
        score_checked(checked, np.ones((2, 8, 8), np.float32))


def test_child_sees_no_home_vault_or_network(tmp_path: Path) -> None:
    secret = tmp_path / "vault" / "ledger.sqlite"
    secret.parent.mkdir()
    secret.write_text("secret")
    cmd = scorer.bwrap_command()
    boot = cmd.index("-c") + 1
    cmd[boot] = (
        "import os, socket, sys\n"
        f"print(os.path.exists({str(secret)!r}), os.path.exists({str(Path.cwd())!r}))\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1); print('net')\n"
        "except OSError:\n    print('nonet')\n"
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, preexec_fn=scorer.limit_child)
    assert out.stdout.split() == ["False", "False", "nonet"], out.stderr


def test_child_cannot_make_a_user_namespace() -> None:
    cmd = scorer.bwrap_command()
    cmd[cmd.index("-c") + 1] = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))\n"  # CLONE_NEWUSER
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, preexec_fn=scorer.limit_child)
    assert out.returncode == 0 and out.stdout.split()[0] == "-1", (out.stdout, out.stderr)


def test_a_child_the_machine_killed_is_a_resource_failure_and_a_bad_output_is_not(tmp_path: Path) -> None:
    checked = inspect_bytes(models.save(models.threshold_model(), tmp_path / "m.onnx").read_bytes())
    with scorer.ConfinedScorer(checked) as child:
        for pid in _tree(child._proc.pid):  # bwrap and the scorer inside: as the OOM killer would
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ScoringError) as killed:
            child.score(np.zeros((4, 16, 16), np.float32))
    assert killed.value.resource
    bad = inspect_bytes(models.wrong_output_shape_model().SerializeToString())
    with pytest.raises(ScoringError) as wrong:
        score_checked(bad, np.zeros((4, 16, 16), np.float32))
    assert not wrong.value.resource  # the model's own fault: the same bytes always fail


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it, deepest first."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [p for child in children for p in _tree(int(child))] + [pid]
