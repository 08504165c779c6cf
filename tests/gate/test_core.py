"""The gate's decisions in-process: coarse verdicts, budgets, replay, bad input, leakage."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from gate.core import Gate
from gate.ledger import Ledger
from gate.scorer import ScoringError
from segfactory.records import Verdict
from synthetic.splits import image_sha256, write_split
from synthetic.versions import create_version
from tests.gate import models
from tests.gate.conftest import make_split, vault_hashes

pytestmark = pytest.mark.bwrap


def test_better_model_wins_and_same_model_does_not(
    gate: Gate, better_model: Path, gate_home: tuple[Path, Path]
) -> None:
    _, baseline = gate_home
    win = gate.submit(better_model.read_bytes(), "t-win")
    assert win.verdict.verdict is Verdict.WIN and win.verdict.tier == "confirm-a"
    same = gate.submit(baseline.read_bytes(), "t-same")
    assert same.verdict.verdict is Verdict.NO_WIN
    assert "object_f1" in win.reason  # the numbers go to people, not into the verdict
    assert set(win.verdict.model_dump()) == {"schema_version", "ticket_id", "tier", "verdict", "queries_left"}


def test_replay_spends_nothing_and_cache_is_per_tier_version(gate: Gate, better_model: Path) -> None:
    first = gate.submit(better_model.read_bytes(), "t1")
    left = first.verdict.queries_left
    again = gate.submit(b"anything at all", "t1")
    assert again.verdict.verdict is first.verdict.verdict and again.verdict.queries_left == left
    other = gate.submit(better_model.read_bytes(), "t2")
    assert other.verdict.verdict is first.verdict.verdict and other.verdict.queries_left == left - 1
    assert other.reason.startswith("cached")


@pytest.mark.slow
def test_replicate_goes_to_confirm_b_only_after_a_win(gate: Gate, better_model: Path, tmp_path: Path) -> None:
    gate.submit(better_model.read_bytes(), "t0")
    replicate = models.save(models.threshold_model(bias=-0.46), tmp_path / "rep.onnx")
    answer = gate.submit(replicate.read_bytes(), "t0-rep", replicate_of="t0")
    assert answer.verdict.tier == "confirm-b" and answer.verdict.verdict is Verdict.WIN
    orphan = gate.submit(replicate.read_bytes(), "t9-rep", replicate_of="never-won")
    assert orphan.verdict.verdict is Verdict.INVALID and "not a recorded WIN" in orphan.reason


def test_budget_exhausted_after_the_last_query(gate: Gate, gate_home: tuple[Path, Path]) -> None:
    home, baseline = gate_home
    ledger = Ledger(home / "vault" / "ledger.sqlite")
    ledger._db.execute("UPDATE tier_versions SET spent = budget - 1 WHERE tier = 'confirm-a'")
    last = gate.submit(baseline.read_bytes(), "t-last")
    assert last.verdict.verdict is Verdict.NO_WIN and last.verdict.queries_left == 0
    after = gate.submit(baseline.read_bytes(), "t-after")
    assert after.verdict.verdict is Verdict.BUDGET_EXHAUSTED
    assert gate.submit(baseline.read_bytes(), "t-after").verdict.verdict is Verdict.BUDGET_EXHAUSTED


def _bad_inputs(tmp: Path) -> dict[str, bytes]:
    secret = "../../vault/tiers/confirm-a/v1/masks.npy"
    return {
        "non-onnx": b"GIF89a not a model",
        "pickle": models.pickle_payload(tmp / "pwned"),
        "external-data": models.external_data_model(secret).SerializeToString(),
        "custom-domain": models.custom_domain_model().SerializeToString(),
        "unbounded-loop": models.unbounded_loop_model().SerializeToString(),
        "huge-constant": models.huge_constant_of_shape_model().SerializeToString(),
        "wrong-output-shape": models.wrong_output_shape_model().SerializeToString(),
        "empty": b"",
    }


# What people read for each bad input (the ledger keeps it; agents get only INVALID).
BAD_INPUT_REASONS = {
    "non-onnx": "not an ONNX protobuf",
    "pickle": "not an ONNX protobuf (empty, pickle or zip payload); nothing was unpickled",
    "external-data": "uses external data; only self-contained graphs are accepted",
    "custom-domain": "custom opset domain 'com.evil' is refused",
    "unbounded-loop": "Loop without a constant trip count",
    "huge-constant": "over MAX_CONSTANT_ELEMENTS=",
    "wrong-output-shape": "model output shape",
    "empty": "not an ONNX protobuf (empty, pickle or zip payload); nothing was unpickled",
    "ticket-id": "ticket id does not match the ticket id pattern",
}


def test_every_bad_input_is_one_undifferentiated_invalid(
    gate: Gate, gate_home: tuple[Path, Path], tmp_path: Path
) -> None:
    home, _ = gate_home
    before = vault_hashes(home / "vault")
    spent_before = gate.ledger.budget_left("confirm-a", 1)
    answers = {name: gate.submit(data, f"bad-{name}") for name, data in _bad_inputs(tmp_path).items()}
    answers["ticket-id"] = gate.submit(b"x", "../../etc/passwd")
    assert set(answers) == set(BAD_INPUT_REASONS)
    for name, outcome in answers.items():
        body = outcome.verdict.model_dump()
        assert body["verdict"] is Verdict.INVALID, name
        assert set(body) == {"schema_version", "ticket_id", "tier", "verdict", "queries_left"}, name
        assert BAD_INPUT_REASONS[name] in outcome.reason, (name, outcome.reason)  # for people
    assert gate.ledger.budget_left("confirm-a", 1) == spent_before - len(answers)  # INVALID spends
    assert not (tmp_path / "pwned").exists()
    assert vault_hashes(home / "vault") == before
    stored = {q.ticket_id: (q.verdict, q.reason) for q in gate.ledger.queries()}
    malformed = f"bad-ticket-{hashlib.sha256(b'../../etc/passwd').hexdigest()[:16]}"  # recorded safely
    for name, outcome in answers.items():  # the people-facing reason is what the ledger keeps
        ticket = malformed if name == "ticket-id" else f"bad-{name}"
        assert stored[ticket] == (Verdict.INVALID.value, outcome.reason), name


def test_changed_win_rule_stops_queries(
    gate_home: tuple[Path, Path], better_model: Path, tmp_path: Path
) -> None:
    home, _ = gate_home
    rule = tmp_path / "win_rule.yaml"
    shutil.copy(Path(__file__).parents[2] / "policies" / "win_rule.yaml", rule)
    gate = Gate(home / "vault", win_rule_path=rule, home_root=home)
    rule.write_text(rule.read_text().replace("margin: 0.0 ", "margin: 0.001 "))
    answer = gate.submit(better_model.read_bytes(), "t-rule")
    assert answer.verdict.verdict is Verdict.INVALID and "changed since it was pinned" in answer.reason
    assert gate.status().win_rule_ok is False


def _dataset(home: Path, images: np.ndarray, masks: np.ndarray, approve: bool = True) -> str:
    train = write_split(
        home.parent / "src-train",
        images,
        masks,
        [{"id": str(i), "sha256": image_sha256(img)} for i, img in enumerate(images)],
        [],
        {},
    )
    dev = write_split(
        home.parent / "src-dev",
        images[:4],
        masks[:4],
        [{"id": str(i), "sha256": image_sha256(img)} for i, img in enumerate(images[:4])],
        [],
        {},
    )
    return create_version(home, "synthetic", {"train": train, "dev": dev}, approve_it=approve).ref


def test_clean_training_data_passes(gate: Gate, gate_home: tuple[Path, Path], better_model: Path) -> None:
    home, _ = gate_home
    ref = _dataset(home, *make_split(999, 40))
    answer = gate.submit(better_model.read_bytes(), "t-clean", train_data=ref, run_id="r1")
    assert answer.verdict.verdict is Verdict.WIN


LEAK_REASONS = {
    "exact": "20 train images of synthetic/v1 equal confirm-a v1 images",
    "near": "are perceptual near-matches of confirm-a v1",
}


def _quarantined(gate: Gate) -> list[tuple[str | None, str, str]]:
    return [(q.run_id, q.ticket_id, q.reason or "") for q in gate.ledger.quarantines()]


@pytest.mark.parametrize("kind", ["exact", "near"])
def test_leak_quarantines_the_run(
    gate: Gate, gate_home: tuple[Path, Path], better_model: Path, kind: str
) -> None:
    home, _ = gate_home
    held, masks = make_split(100, 160)  # the confirm-a images (same seed as the tier)
    images = held[:20] if kind == "exact" else np.clip(held[:20] + 0.002, 0, 1)
    ref = _dataset(
        home,
        np.concatenate([make_split(5, 20)[0], images]),
        np.concatenate([make_split(5, 20)[1], masks[:20]]),
    )
    answer = gate.submit(better_model.read_bytes(), f"t-leak-{kind}", train_data=ref, run_id="r-leak")
    assert answer.verdict.verdict is Verdict.INVALID
    assert answer.reason.startswith("leak: ") and LEAK_REASONS[kind] in answer.reason
    assert answer.reason.endswith("run quarantined, a person must review and rotate")
    [(run_id, ticket_id, reason)] = _quarantined(gate)  # the quarantine row, with its reason
    assert (run_id, ticket_id) == ("r-leak", f"t-leak-{kind}") and LEAK_REASONS[kind] in reason
    [row] = gate.status().quarantine
    assert row.ts is not None and row.reason == reason
    hidden = gate.status().for_agent().quarantine  # an agent's credential sees that, not why
    assert [(q.run_id, q.ticket_id, q.reason, q.ts) for q in hidden] == [
        ("r-leak", f"t-leak-{kind}", None, None)
    ]
    later = gate.submit(better_model.read_bytes(), f"t-later-{kind}", run_id="r-leak")
    assert (
        later.verdict.verdict is Verdict.INVALID and later.reason == "run r-leak is quarantined for a person"
    )
    assert len(_quarantined(gate)) == 1  # refused as quarantined, not quarantined again
    other = gate.submit(better_model.read_bytes(), f"t-other-{kind}", run_id="r-other")
    assert other.verdict.verdict is Verdict.WIN  # only that run is stopped


def test_unapproved_or_traversing_dataset_is_invalid(
    gate: Gate, gate_home: tuple[Path, Path], better_model: Path
) -> None:
    home, _ = gate_home
    ref = _dataset(home, *make_split(998, 10), approve=False)
    expected = {
        ref: f"dataset version {ref} is not approved in the registry; a person must approve it",
        "../../vault/v1": "dataset version '../../vault/v1' cannot be resolved: dataset version "
        "'../../vault/v1' must look like NAME/vK",
        "synthetic/v99": "dataset version 'synthetic/v99' cannot be resolved: dataset version "
        "synthetic/v99 not found under",
    }
    for i, (name, why) in enumerate(expected.items()):
        answer = gate.submit(better_model.read_bytes(), f"t-ds-{i}", train_data=name, run_id=f"r{i}")
        assert answer.verdict.verdict is Verdict.INVALID, name
        assert answer.reason.startswith(f"leak: {why}"), (name, answer.reason)
    assert [(r, t) for r, t, _ in _quarantined(gate)] == [
        ("r0", "t-ds-0"),
        ("r1", "t-ds-1"),
        ("r2", "t-ds-2"),
    ]
    assert all(
        why in reason for (_, _, reason), why in zip(_quarantined(gate), expected.values(), strict=True)
    )


def test_promotion_needs_a_win_and_a_replicate_win(gate: Gate, better_model: Path, tmp_path: Path) -> None:
    from segfactory.errors import GateError

    gate.submit(better_model.read_bytes(), "p1")
    with pytest.raises(GateError, match="replicate"):
        gate.promote("p1")
    with pytest.raises(GateError, match="no recorded WIN"):
        gate.promote("never-submitted")
    replicate = models.save(models.threshold_model(bias=-0.46), tmp_path / "rep.onnx")
    assert gate.submit(replicate.read_bytes(), "p1-rep", replicate_of="p1").verdict.verdict is Verdict.WIN
    sha = gate.promote("p1")
    assert gate.ledger.current_best()["model_sha256"] == sha  # type: ignore[index]
    assert gate.submit(better_model.read_bytes(), "p2").verdict.verdict is Verdict.NO_WIN  # now equal to best


def test_a_scoring_failure_of_the_machine_is_answered_invalid_and_never_cached(
    gate: Gate, better_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ticket that filled the scoring device while a rival was scored must not make the rival's
    model INVALID for good: the same bytes submitted again are scored afresh."""
    real = gate.compare
    failures = iter([ScoringError("scorer child failed: std::bad_alloc", resource=True)])

    def flaky(*args: object, **kwargs: object) -> object:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real(*args, **kwargs)

    monkeypatch.setattr(gate, "compare", flaky)
    first = gate.submit(better_model.read_bytes(), "t-oom")
    assert first.verdict.verdict is Verdict.INVALID and "lack of resources (not cached)" in first.reason
    again = gate.submit(better_model.read_bytes(), "t-again")
    assert again.verdict.verdict is Verdict.WIN and not again.reason.startswith("cached")


def test_a_scoring_failure_of_the_model_is_cached(
    gate: Gate, better_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise ScoringError("model output holds NaN or infinity")

    monkeypatch.setattr(gate, "compare", broken)
    first = gate.submit(better_model.read_bytes(), "t-nan")
    assert first.verdict.verdict is Verdict.INVALID
    monkeypatch.undo()
    again = gate.submit(better_model.read_bytes(), "t-nan-2")
    assert again.verdict.verdict is Verdict.INVALID and again.reason.startswith("cached")
