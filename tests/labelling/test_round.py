"""A labelling round over real components: propose, the console's decisions (real SQLite), finetune
through the real runner (worker stand-in), the round record; bad input gives clear errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.labelling import (
    FinetuneSetup,
    finetune_round,
    label_rounds,
    load_round,
    newest_model,
    open_round,
    propose_labels,
)
from audit import AuditLog, MemoryAnchorStore
from console._labels import LabelDesk, StaleEdit
from runner.scheduler import Scheduler
from segfactory.errors import DataError, UsageError
from segfactory.home import Home
from synthetic.splits import read_split
from synthetic.versions import DatasetVersion, resolve
from tests.runner.conftest import StandinLauncher


def _png(mask: np.ndarray) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray((mask * 255).astype(np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


def _open(home: Home, unlabelled: Path, base: DatasetVersion) -> str:
    queue, path = propose_labels(home, unlabelled)
    return open_round(home, queue, path, base=base).ref


def test_a_round_opens_as_a_version_with_a_console_queue(
    home: Home, unlabelled: Path, base: DatasetVersion, discs: Path
) -> None:
    ref = _open(home, unlabelled, base)
    assert ref == "labels/v1" and load_round(home, ref).base == base.ref
    version = resolve(home.root, ref)
    proposed, truth = read_split(version.train), read_split(discs)
    assert proposed.masks.any() and (proposed.masks & truth.masks).sum() >= 0.5 * proposed.masks.sum()
    assert read_split(version.dev).content_hash == read_split(base.dev).content_hash
    items = LabelDesk(home, _Sink()).queue(ref)
    assert sorted(i.image_id for i in items) == list(range(12))
    scores = [i.score for i in items if i.score is not None]
    assert scores == sorted(scores) and all("auto-label" in i.reason for i in items)  # least confident first
    with pytest.raises(UsageError, match="not a labelling round"):
        load_round(home, base.ref)


class _Sink:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def append(self, actor: str, event: str, payload: dict[str, Any], run_id: str | None = None) -> None:
        self.records.append((event, payload))


@pytest.mark.slow  # ~20 s: six confined-scorer runs and a stand-in training
def test_finetune_trains_on_what_survived_review_and_records_the_round(
    home: Home, unlabelled: Path, base: DatasetVersion, discs: Path, scheduler: Scheduler
) -> None:
    queue, path = propose_labels(home, unlabelled)
    ref = open_round(home, queue, path, base=base).ref
    desk, truth = LabelDesk(home, _Sink()), read_split(discs)
    a, b, c, d = sorted({item.image_index for item in queue.items})[:4]  # four images with proposals
    desk.decide(ref, "train", a, "keep", by="ann", seconds=30, rev_seen=0)
    desk.decide(ref, "train", b, "keep", by="ann", seconds=30, rev_seen=0)
    desk.decide(ref, "train", c, "fix", by="ann", seconds=90, rev_seen=0, mask_png=_png(truth.masks[c]))
    desk.decide(ref, "train", d, "drop", by="ann", seconds=30, rev_seen=0)
    n = {i: sum(1 for item in queue.items if item.image_index == i) for i in (a, b, c, d)}
    with AuditLog(home, MemoryAnchorStore()) as log:
        record = finetune_round(FinetuneSetup(home, log, backend=StandinLauncher(), scheduler=scheduler), ref)
    assert record.status == "DONE", record.reason
    assert (record.reviewed, record.kept, record.fixed, record.dropped) == (4, 2, 1, 1)
    assert record.human_minutes_per_image == 0.75 and record.labels_per_hour == 3 * 3600 / 180
    assert record.precision == pytest.approx(
        (n[a] + n[b] + n[c]) / sum(n.values()), abs=1e-4
    )  # d's were wrong
    reviewed = resolve(home.root, record.reviewed_version)
    train = read_split(reviewed.train)
    assert reviewed.approved and len(train) == 16 + 3  # base train + kept and fixed, not the dropped one
    assert np.array_equal(train.masks[2], truth.masks[c])  # the person's fix, not the proposal, first
    assert train.image_meta[3] == read_split(base.train).image_meta[0]
    assert record.dev_object_f1 is not None and record.dev_gain is not None and record.gate_verdict is None
    assert label_rounds(home) == [record] and newest_model(home) == Path(str(record.model))
    assert "| labels/v1 | 4 | 2 | 1 | 1 |" in (home.people_dir("labels") / "report.md").read_text()
    queue, _ = propose_labels(home, unlabelled)  # the next pass: the finetuned model labels
    assert queue.model == record.model
    with pytest.raises(StaleEdit, match="no longer the newest"):  # a decision against the old version
        desk.decide(ref, "train", d + 1, "keep", by="ann", seconds=5, rev_seen=0)


def test_finetuning_with_no_reviewed_labels_is_refused(
    home: Home, unlabelled: Path, base: DatasetVersion
) -> None:
    ref = _open(home, unlabelled, base)
    with AuditLog(home, MemoryAnchorStore()) as log:
        setup = FinetuneSetup(home, log, backend=StandinLauncher())
        with pytest.raises(DataError, match="no reviewed labels on labels/v1: 0 decisions"):
            finetune_round(setup, ref)
        LabelDesk(home, log).decide(ref, "train", 0, "drop", by="ann", seconds=3, rev_seen=0)
        with pytest.raises(DataError, match="1 decisions, none kept or fixed"):
            finetune_round(setup, ref)
    assert label_rounds(home) == [] and not (home.datasets / "labels" / "v2").exists()


def test_cli_finetune_without_a_round_is_a_clear_error(home: Home, cli: Callable[..., Any]) -> None:
    res = cli("label", "finetune", "--home", str(home.root), "--no-gate", "--json")
    assert res.returncode != 0 and res.stdout == ""
    assert "no labelling round in this home" in res.stderr
    report = cli("label", "report", "--home", str(home.root), "--json")
    assert report.returncode == 0 and json.loads(report.stdout) == {"rounds": []}
