"""Comparisons run one seed at a time, combined: the same summary one comparison over all the
seeds gives, and a clear refusal of what is not one comparison."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from controls.compare import run_arms
from controls.compare_combine import combine, read_compare
from controls.compare_report import ArmRun, SealedScores, summarise
from controls.isolation import Incumbent
from segfactory.errors import UsageError
from segfactory.home import SOURCE_ROOT, Home
from tests.conftest import CliResult

SCORES = {  # sealed object F1 per arm and seed
    "agent": [0.70, 0.66, 0.73],
    "nnunet": [0.68, 0.69, 0.67],
}


class Store:
    """A best that nothing moves (what ``run_arms`` needs of the gate)."""

    def current(self) -> Incumbent:
        return Incumbent(sha256="b" * 64, model=Path("/m/best.onnx"))

    def restore(self, incumbent: Incumbent, reason: str) -> None:  # pragma: no cover - never moved
        raise AssertionError("nothing moved the best")

    def fresh_tiers(self) -> dict[str, int]:
        return {}


def arm_run(arm: str, seed: int) -> ArmRun:
    f1 = SCORES[arm][seed]
    return ArmRun(
        run_id=f"{arm}-s{seed}",
        curve=[(100.0, f1 - 0.02)],
        sealed=SealedScores(
            object_f1={"estimate": f1, "low": f1 - 0.02, "high": f1 + 0.02, "alpha": 0.1},
            worst_slice_recall=f1 / 3,
        ),
    )


def write_compare(home: Home, compare_id: str, seeds: int, first_seed: int, **changes: object) -> None:
    """A finished comparison's compare.json, as ``run_compare`` writes it."""
    _, results = run_arms(list(SCORES), seeds, arm_run, Store(), first_seed=first_seed)
    summary = summarise(results, proposer="rules", budget_s=1500, seeds=seeds).model_copy(
        update={"compare_id": compare_id, "incumbent": "b" * 64, "first_seed": first_seed, **changes}
    )
    people = home.people_dir(compare_id)
    people.mkdir(parents=True)
    arms = {a: [r.model_dump(mode="json", exclude_unset=True) for r in rows] for a, rows in results.items()}
    (people / "compare.json").write_text(json.dumps({"summary": summary.as_json(), "arms": arms}))


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home")


def test_three_one_seed_comparisons_combine_into_the_three_seed_one(home: Home) -> None:
    for seed in range(3):
        write_compare(home, f"c{seed}", 1, seed, source="sha256:" + "1" * 64)
    got = combine(home, ["c2", "c0", "c1"])  # any order: arm-runs are put in seed order
    _, together = run_arms(list(SCORES), 3, arm_run, Store())
    want = summarise(together, proposer="rules", budget_s=1500, seeds=3)
    assert got.ranking == want.ranking and got.paired_differences == want.paired_differences
    assert got.verdict == want.verdict and got.arms == want.arms
    pair = got.paired_differences["agent - nnunet"]["object_f1"]
    assert pair.per_seed == pytest.approx([0.02, -0.03, 0.06]) and pair.n == 3 and pair.low is not None
    assert got.combined_from == ["c2", "c0", "c1"] and got.first_seed == 0 and got.seeds == 3
    written = json.loads(Path(str(got.report)).read_text())
    assert [r["seed"] for r in written["arms"]["agent"]] == [0, 1, 2]
    assert Path(str(got.plot)).is_file()
    assert read_compare(home, str(got.compare_id))[0].combined_from == ["c2", "c0", "c1"]


def test_a_report_written_before_seeds_were_kept_reads_its_seeds_in_order(home: Home) -> None:
    write_compare(home, "old", 2, 0)
    path = home.people_dir("old") / "compare.json"
    data = json.loads(path.read_text())
    for rows in data["arms"].values():
        for row in rows:
            del row["seed"]
    del data["summary"]["first_seed"]
    path.write_text(json.dumps(data))
    _, arms = read_compare(home, "old")
    assert [r.seed for r in arms["agent"]] == [0, 1]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"first_seed": 0}, "seed 0 is in both a and b; run later seeds with --first-seed"),
        ({"first_seed": 1, "budget_s_per_arm_and_seed": 480.0}, "differ in their budget per arm and seed"),
        ({"first_seed": 1, "proposer": "openai:gpt-5"}, "differ in their proposer"),
        ({"first_seed": 1, "incumbent": "c" * 64}, "differ in their incumbent every arm started from"),
    ],
)
def test_what_is_not_one_comparison_is_refused(home: Home, second: dict[str, object], message: str) -> None:
    write_compare(home, "a", 1, 0)
    first_seed = int(str(second.pop("first_seed")))
    write_compare(home, "b", 1, first_seed, **second)
    with pytest.raises(UsageError, match=message):
        combine(home, ["a", "b"])
    assert sorted(p.name for p in home.runs.iterdir()) == ["a", "b"]  # nothing written


def test_seeds_run_on_different_code_combine_and_the_verdict_says_so(home: Home) -> None:
    same = "sha256:" + "1" * 64
    write_compare(home, "a", 1, 0, source=same)
    write_compare(home, "b", 1, 1, source=same)
    write_compare(home, "c", 1, 2, source="sha256:" + "2" * 64)
    one = combine(home, ["a", "b"])
    assert one.sources == {"a": same, "b": same} and "same recorded code" not in one.verdict
    mixed = combine(home, ["a", "b", "c"])
    assert mixed.sources is not None and mixed.sources["c"] == "sha256:" + "2" * 64
    assert mixed.verdict.endswith(
        "did not all run on the same recorded code (a: sha256:111111111111, b: sha256:111111111111, "
        "c: sha256:222222222222)."
    )
    write_compare(home, "old", 1, 2)  # written before comparisons kept their source
    assert "old: not recorded" in combine(home, ["a", "old"]).verdict


def test_a_comparison_records_the_code_it_ran() -> None:
    from segfactory.source import source_digest, source_files

    digest = source_digest()
    names = {p.relative_to(SOURCE_ROOT).as_posix() for p in source_files()}
    assert digest.startswith("sha256:") and len(digest) == 71
    assert {"controls/compare.py", "policies/budgets.yaml", "vision/train.py"} <= names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)


def test_an_unfinished_or_missing_comparison_is_refused(home: Home) -> None:
    write_compare(home, "a", 1, 0)
    running = home.people_dir("running")
    running.mkdir(parents=True)
    (running / "compare.json").write_text(json.dumps({"agent": []}))  # what a running one has so far
    with pytest.raises(UsageError, match="not a finished comparison's report"):
        combine(home, ["a", "running"])
    with pytest.raises(UsageError, match="no comparison 'gone'"):
        combine(home, ["a", "gone"])
    with pytest.raises(UsageError, match="name two or more different comparisons"):
        combine(home, ["a", "a"])


def test_the_cli_combines_and_refuses_in_one_line(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    (home.root).mkdir()
    (home.root / "home.json").write_text(json.dumps({"profile": "demo"}))
    write_compare(home, "a", 1, 0)
    write_compare(home, "b", 1, 1)
    bad = cli("compare", "--combine", "a,nope", "--home", str(home.root), "--json")
    assert bad.returncode != 0 and bad.stdout == ""
    assert bad.stderr.startswith("segfactory: error: --combine: no comparison 'nope'"), bad.stderr
    ok = cli("compare", "--combine", "a,b", "--home", str(home.root), "--json")
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert summary["combined_from"] == ["a", "b"] and summary["seeds"] == 2
    assert summary["arms"]["agent"]["sealed_worst_slice_recall"] == pytest.approx([0.70 / 3, 0.66 / 3])
