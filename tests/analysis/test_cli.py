"""`segfactory analyse` end to end: real generator data, a real ONNX model, real onnxruntime."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis.toy import contrast_onnx
from synthetic import generate


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data") / "v1"
    generate(80, 48, seed=21, workers=1).write(root / "train")
    generate(160, 48, seed=22, workers=1).write(root / "dev")
    return root


def _json(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.mark.slow
def test_analyse_writes_a_report_and_prints_one_json_object(
    cli: Callable[..., Any], tmp_home: Path, tmp_path: Path, version: Path
) -> None:
    model = contrast_onnx(tmp_path / "model.onnx", 40.0)
    out = tmp_path / "report"
    data = _json(
        cli(
            "analyse",
            "--model",
            str(model),
            "--data",
            str(version),
            "--out",
            str(out),
            "--home",
            str(tmp_home),
            "--json",
        )
    )
    assert {
        "out",
        "report",
        "html",
        "overall",
        "error_counts",
        "findings",
        "recommendations",
        "notes",
    } <= set(data)
    assert data["n_images"] == 160 and data["recommendations"]
    first = data["recommendations"][0]
    assert {"action", "kind", "evidence", "predicted_effect"} <= set(first)
    assert (out / "report.html").is_file() and (out / "report.json").is_file()
    report = json.loads((out / "report.json").read_text())
    assert report["train_dev_gap"] is not None and report["dev_labels"]["n_images"] == 160


@pytest.mark.slow
def test_a_model_that_predicts_nothing_is_reported_not_crashed(
    cli: Callable[..., Any], tmp_home: Path, tmp_path: Path, version: Path
) -> None:
    model = contrast_onnx(tmp_path / "model.onnx", 0.0)  # sigmoid(-2) < 0.5 everywhere
    data = _json(
        cli(
            "analyse",
            "--model",
            str(model),
            "--data",
            str(version / "dev"),
            "--out",
            str(tmp_path / "r"),
            "--home",
            str(tmp_home),
            "--json",
            "--no-labels",
        )
    )
    assert any("predicts no void pixel" in n for n in data["notes"])
    assert data["overall"]["miss_rate"] == 1.0


def test_errors_are_one_line_on_stderr(
    cli: Callable[..., Any], tmp_home: Path, tmp_path: Path, version: Path
) -> None:
    result = cli(
        "analyse", "--model", str(tmp_path / "none.onnx"), "--data", str(version), "--home", str(tmp_home)
    )
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith("segfactory: error: no model at") and result.stderr.count("\n") == 1


def test_a_vault_path_is_refused(
    cli: Callable[..., Any], tmp_home: Path, tmp_path: Path, version: Path
) -> None:
    tier = tmp_home / "vault" / "confirm-a" / "v1"
    tier.parent.mkdir(parents=True)
    tier.symlink_to(version / "dev")
    model = contrast_onnx(tmp_path / "model.onnx", 40.0)
    result = cli("analyse", "--model", str(model), "--data", str(tier), "--home", str(tmp_home), "--json")
    assert result.returncode != 0 and result.stdout == ""
    assert "under the home's vault" in result.stderr and not (tmp_path / "analysis").exists()
