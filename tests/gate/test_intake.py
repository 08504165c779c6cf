"""Hardened ONNX intake: hostile graphs are refused before anything runs them."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from gate import intake
from gate.intake import IntakeError, inspect_bytes, inspect_model
from tests.gate import models

HOSTILE = {
    "custom domain op": models.custom_domain_model,
    "EPContext node": models.epcontext_model,
    "unbounded Loop": models.unbounded_loop_model,
    "huge ConstantOfShape": models.huge_constant_of_shape_model,
    "wrong signature": models.wrong_signature_model,
}


def test_good_models_pass_with_their_hash() -> None:
    for model in (models.threshold_model(), models.conv_model()):
        checked = inspect_bytes(model.SerializeToString())
        assert len(checked.sha256) == 64 and checked.data == model.SerializeToString()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_graphs_are_refused(name: str) -> None:
    with pytest.raises(IntakeError):
        inspect_bytes(HOSTILE[name]().SerializeToString())


def test_model_local_function_is_refused() -> None:
    model = models.threshold_model()
    model.functions.append(onnx.FunctionProto(name="f", domain="local"))
    with pytest.raises(IntakeError, match="functions"):
        inspect_bytes(model.SerializeToString())


def test_pickle_renamed_onnx_is_refused_and_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "model.onnx"
    path.write_bytes(models.pickle_payload(marker))
    with pytest.raises(IntakeError, match="not an ONNX"):
        inspect_model(path)
    assert not marker.exists()


@pytest.mark.parametrize("payload", [b"", b"hello world, not onnx", b"PK\x03\x04zipzip", os.urandom(256)])
def test_non_onnx_bytes_are_refused(payload: bytes) -> None:
    with pytest.raises(IntakeError):
        inspect_bytes(payload)


def test_external_data_pointing_at_a_vault_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "vault" / "tiers" / "confirm-a" / "v1" / "masks.npy"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(b"\x00" * 64)
    with pytest.raises(IntakeError, match="external data"):
        inspect_bytes(models.external_data_model(str(secret)).SerializeToString())


def test_external_data_through_a_planted_symlink_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "vault-file"
    secret.write_bytes(b"\x00" * 64)
    work = tmp_path / "work"
    work.mkdir()
    (work / "weights.bin").symlink_to(secret)
    model = models.save(models.external_data_model("weights.bin"), work / "model.onnx")
    with pytest.raises(IntakeError, match="external data"):
        inspect_model(model)


def test_a_symlinked_model_path_is_refused(tmp_path: Path) -> None:
    real = models.save(models.threshold_model(), tmp_path / "real.onnx")
    link = tmp_path / "link.onnx"
    link.symlink_to(real)
    with pytest.raises(IntakeError, match="symlink"):
        inspect_model(link)


def test_path_traversal_names_no_file(tmp_path: Path) -> None:
    with pytest.raises(IntakeError):
        inspect_model(tmp_path / ".." / ".." / "etc" / "shadow-does-not-exist")


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.onnx"
    path.write_bytes(models.threshold_model().SerializeToString() + b"\x00" * 2048)
    with pytest.raises(IntakeError, match="MAX_MODEL_BYTES"):
        intake.read_capped(path, cap=1024)


def test_large_initializers_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    from gate import _intake_rules

    # the cap lives in the confined child; lowered here, the rules run in this test's process
    monkeypatch.setattr(_intake_rules, "MAX_INITIALIZER_BYTES", 64)
    with pytest.raises(_intake_rules.RuleViolation, match="MAX_INITIALIZER_BYTES"):
        _intake_rules.check(models.conv_model(channels=8).SerializeToString())


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_inits_own_model_check_applies_the_same_rules(name: str, tmp_path: Path) -> None:
    """``inspect_own_model`` (init's baseline only) runs in process but refuses what the confined one does."""
    path = tmp_path / "m.onnx"
    path.write_bytes(HOSTILE[name]().SerializeToString())
    with pytest.raises(IntakeError):
        intake.inspect_own_model(path)
    good = models.save(models.threshold_model(), tmp_path / "good.onnx")
    assert intake.inspect_own_model(good).sha256 == inspect_model(good).sha256


# -- what scoring a model costs, counted from its bytes ----------------------------------------------
CONV_COST = 64 * 64 * 4 * 9 + 64 * 64 * 4  # conv_model on one 64x64 image: 3x3 to 4 channels, 1x1 back


def test_the_confined_intake_counts_what_scoring_a_model_costs() -> None:
    """Multiply-accumulates of the convolutions on one 64x64 image, by shape inference from the
    bytes: an ensemble costs its members, flip views on the batch double it, a net without a
    counted op costs nothing, and a loop body hiding a convolution cannot be counted."""
    assert inspect_bytes(models.conv_model().SerializeToString()).cost == CONV_COST
    assert inspect_bytes(models.ensemble_model(3, flipped=False).SerializeToString()).cost == 3 * CONV_COST
    assert inspect_bytes(models.ensemble_model(3, flipped=True).SerializeToString()).cost == 6 * CONV_COST
    assert inspect_bytes(models.threshold_model().SerializeToString()).cost == 0
    assert inspect_bytes(models.conv_in_loop_model().SerializeToString()).cost is None


def test_a_real_exported_net_is_counted_through_its_dynamic_shapes(tmp_path: Path) -> None:
    """The factory's own U-Net export (dynamic batch and size, concatenated skips whose channels
    shape inference leaves open) is counted, and a wider one costs more."""
    from vision.export import export_onnx
    from vision.models import build_model

    costs = []
    for width in (8, 16):
        path = export_onnx(build_model("unet-plain", width, stages=3), tmp_path / f"w{width}.onnx")
        costs.append(inspect_model(path).cost)
    assert costs[0] and costs[1] and costs[1] > 3 * costs[0]  # twice the channels: about 4x the MACs
