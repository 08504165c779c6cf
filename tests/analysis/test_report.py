"""The whole analysis on a toy dev set: report record, bad input, files written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.render import write_report
from analysis.report import AnalysisReport, Evaluated, Extras, analyse
from analysis.toy import HistogramTrainer, ToySplit, toy_split
from segfactory.errors import DataError, UsageError


@pytest.fixture(scope="module")
def fitted() -> tuple[ToySplit, ToySplit, np.ndarray, np.ndarray]:
    train, dev = toy_split(300, 40, seed=11), toy_split(300, 40, seed=12)
    model = HistogramTrainer().fit(train.images, train.masks, seed=0)
    return train, dev, model.predict(train.images), model.predict(dev.images)


def _no_nan(report: AnalysisReport) -> None:
    json.dumps(report.model_dump(mode="json"), allow_nan=False)  # raises on NaN or inf


def test_a_full_analysis_is_a_strict_json_record(
    fitted: tuple[ToySplit, ToySplit, np.ndarray, np.ndarray],
) -> None:
    train, dev, ptrain, pdev = fitted
    extras = Extras(train=Evaluated(train, ptrain), learning_curve={"0.25": 0.3, "0.5": 0.4, "1.0": 0.45})
    report, _ = analyse(Evaluated(dev, pdev), model_sha256="m", data="dev-hash", extras=extras)
    _no_nan(report)
    assert AnalysisReport.model_validate_json(report.model_dump_json()) == report
    assert report.n_images == 300 and report.findings and report.recommendations
    assert (
        report.dev_labels is not None and report.train_labels is not None and report.train_dev_gap is not None
    )
    assert report.findings[0].confirmed and all(r.confirmed for r in report.findings)
    assert set(report.error_counts) == {"missed", "false_alarm", "merged", "split", "wrong_boundary"}
    with pytest.raises(ValueError):
        AnalysisReport.model_validate({**report.model_dump(), "vault_scores": {}})


def test_a_model_that_predicts_nothing_is_stated(
    fitted: tuple[ToySplit, ToySplit, np.ndarray, np.ndarray],
) -> None:
    _, dev, _, pdev = fitted
    report, _ = analyse(Evaluated(dev, np.zeros_like(pdev)))
    _no_nan(report)
    assert any("predicts no void pixel" in n for n in report.notes)
    assert report.overall["miss_rate"] == 1.0 and report.overall["false_alarms_per_image"] == 0.0


def test_missing_metadata_columns_are_stated(
    fitted: tuple[ToySplit, ToySplit, np.ndarray, np.ndarray],
) -> None:
    _, dev, _, pdev = fitted
    bare = ToySplit(
        dev.images,
        dev.masks,
        [{"id": m["id"]} for m in dev.image_meta],
        [{k: v for k, v in d.items() if k not in ("contrast", "shape")} for d in dev.defects],
    )
    report, _ = analyse(Evaluated(bare, pdev), extras=Extras(label_estimate=False))
    _no_nan(report)
    for attr in ("dose", "background", "contrast", "shape"):
        assert any(f"'{attr}' is missing" in n for n in report.notes), attr


def test_empty_dev_and_no_defects(fitted: tuple[ToySplit, ToySplit, np.ndarray, np.ndarray]) -> None:
    _, dev, _, pdev = fitted
    with pytest.raises(DataError, match="no images"):
        analyse(Evaluated(ToySplit(dev.images[:0], dev.masks[:0], [], []), pdev[:0]))
    clean = ToySplit(dev.images, np.zeros_like(dev.masks), dev.image_meta, [])
    report, _ = analyse(Evaluated(clean, pdev), extras=Extras(label_estimate=False))
    _no_nan(report)
    assert any("no defect rows" in n for n in report.notes)


def test_the_report_folder_holds_markdown_html_plots_and_crops(
    fitted: tuple[ToySplit, ToySplit, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    _, dev, _, pdev = fitted
    ev = Evaluated(dev, pdev)
    report, errors = analyse(ev, extras=Extras(label_estimate=False, learning_curve={"0.5": 0.4, "1.0": 0.5}))
    out = tmp_path / "analysis"
    written = write_report(report, ev, errors, out)
    names = {p.name for p in out.iterdir()}
    assert {
        "report.json",
        "report.md",
        "report.html",
        "errors.png",
        "slices.png",
        "learning_curve.png",
    } <= names
    assert written.crops and all((out / c).is_file() and c.startswith("crop_") for c in written.crops)
    assert "## Recommendations" in (out / "report.md").read_text()
    assert "<table>" in (out / "report.html").read_text()
    assert AnalysisReport.model_validate_json((out / "report.json").read_text()).crops == written.crops
    with pytest.raises(UsageError, match="not empty"):
        write_report(report, ev, errors, out)
