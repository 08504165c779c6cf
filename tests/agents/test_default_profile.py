"""The default profile: nnU-Net's recipe for one GPU, a CPU-sized variant said at start where none is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents import report as rpt
from agents._report_md import render_markdown
from agents.run import check_base_config
from agents.run_policy import RUN_POLICY, load_run_defaults
from agents.state import FactoryState
from runner._workspace import _deep_merge
from segfactory.errors import PolicyError, UsageError
from segfactory.home import SOURCE_ROOT
from vision.config import load_config
from vision.recipes import NNUNET_RECIPE, recipe_patch


def test_with_a_gpu_the_default_profile_runs_its_gpu_config_as_written() -> None:
    defaults = load_run_defaults("default", has_gpu=True)
    assert defaults.base_config == "configs/run-default.yaml" and defaults.sized_note == ""
    assert defaults.ticket.device_seconds == 900
    # an overnight run holds tens of tickets
    assert 20 <= defaults.run["device_seconds"] / defaults.ticket.device_seconds <= 100
    check_base_config(defaults, has_gpu=True)


def test_without_a_gpu_it_runs_the_cpu_sized_config_and_says_why() -> None:
    defaults = load_run_defaults("default", has_gpu=False)
    assert defaults.base_config == "configs/run-default-cpu.yaml" and defaults.cpu is None
    assert defaults.ticket.device_seconds == 300 and defaults.ticket.epochs == 4
    assert "no NVIDIA GPU on this machine" in defaults.sized_note
    assert (
        "configs/run-default-cpu.yaml" in defaults.sized_note
        and "configs/run-default.yaml" in defaults.sized_note
    )
    assert defaults.run == load_run_defaults("default", has_gpu=True).run  # the run's own caps stay
    check_base_config(defaults, has_gpu=False)


def test_the_demo_profile_is_the_same_on_either_machine() -> None:
    assert load_run_defaults("demo", has_gpu=True) == load_run_defaults("demo", has_gpu=False)
    assert load_run_defaults("demo", has_gpu=False).sized_note == ""


def test_a_config_that_asks_for_cuda_without_a_gpu_is_one_clear_error_before_anything_starts() -> None:
    gpu_sized = load_run_defaults("default", has_gpu=True)
    with pytest.raises(
        UsageError,
        match=r"configs/run-default.yaml asks for device cuda and this machine has no "
        r"NVIDIA GPU",
    ):
        check_base_config(gpu_sized, has_gpu=False)


def test_the_gpu_config_is_nnunets_recipe_written_out() -> None:
    raw = yaml.safe_load((SOURCE_ROOT / "configs" / "run-default.yaml").read_text())
    assert _deep_merge(raw, recipe_patch(NNUNET_RECIPE)) == raw  # the recipe changes nothing in it
    config = load_config(SOURCE_ROOT / "configs" / "run-default.yaml")
    assert config.device == "cuda" and config.model.name == "unet-plain" and config.deep_supervision


def test_the_cpu_config_is_the_same_recipe_cut_down() -> None:
    gpu = yaml.safe_load((SOURCE_ROOT / "configs" / "run-default.yaml").read_text())
    cpu = yaml.safe_load((SOURCE_ROOT / "configs" / "run-default-cpu.yaml").read_text())
    # optimiser and schedule too: nnU-Net's SGD at momentum 0.99 learnt in 14 of 20 seeds in a CPU
    # ticket's 4 epochs (benchmarks/bench_recipes.py), AdamW with a warmup epoch in 20 of 20
    cut = {"model", "epochs", "batch_size", "sampling", "device", "threads", "max_train_images"}
    cut |= {"optim", "schedule"}
    assert {k: v for k, v in cpu.items() if k not in cut} == {k: v for k, v in gpu.items() if k not in cut}
    assert (
        cpu["model"]["name"] == gpu["model"]["name"]
        and cpu["model"]["decoder_width"] < gpu["model"]["decoder_width"]
    )
    assert cpu["sampling"]["defect_centred_p"] == gpu["sampling"]["defect_centred_p"]
    assert cpu["optim"]["name"] == "adamw" and cpu["schedule"]["warmup_epochs"] >= 1
    assert load_config(SOURCE_ROOT / "configs" / "run-default-cpu.yaml").device == "cpu"


def test_a_cpu_variant_that_does_not_parse_names_the_file_and_line(tmp_path: Path) -> None:
    lines = RUN_POLICY.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "configs/run-default-cpu.yaml" in line)
    lines[at + 2] = "        device_seconds: soon"
    bad = tmp_path / "run.yaml"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyError, match=rf"{bad}:{at + 3}: profiles.default.cpu.ticket.device_seconds"):
        load_run_defaults("default", bad, has_gpu=False)


def test_the_report_names_the_training_config_and_why() -> None:
    sized = load_run_defaults("default", has_gpu=False)
    report = rpt.RunReport(
        run_id="r1",
        profile="default",
        proposer="rules",
        backend="bwrap",
        stop_reason="done",
        base_config=sized.base_config,
        sized_note=sized.sized_note,
        started_at=1.0,
        ended_at=2.0,
        win_rule_sha256=None,
        tickets=[],
        not_run=[],
        approvals=[],
        counts=rpt.counts([], FactoryState(run_id="r1")),
        device_seconds=0.0,
        milestone=None,
        audit=None,
        llm_usage={},
        analysis_dir=None,
    )
    md = render_markdown(report)
    assert "- training config `configs/run-default-cpu.yaml`: no NVIDIA GPU on this machine" in md
