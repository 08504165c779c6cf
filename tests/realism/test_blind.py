"""Blind-test bookkeeping: balanced shuffled trials, crops from the right set, scored guesses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.realism import blind
from analysis.realism.standin import write_stand_in
from segfactory.errors import UsageError
from synthetic import generate
from synthetic.exchange import import_real


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("blind")
    write_stand_in(root / "src", 60, 48, 9001)
    import_real(root / "src", root / "real")
    generate(20, 48, 1, workers=1).write(root / "syn")
    return root / "syn", root / "real"


def test_session_is_balanced_shuffled_and_scores_with_an_interval(
    sets: tuple[Path, Path], tmp_path: Path
) -> None:
    syn, real = sets
    session = blind.new_session(syn, real, 20, seed=3)
    sources = [t.source for t in session.trials]
    assert sources.count("real") == 10 and sources != sorted(sources) and session.side == 32
    k_real = sources.index("real")
    expected = np.load(real / "real-dev" / "images.npy")[session.trials[k_real].index]
    t = session.trials[k_real]
    assert np.array_equal(blind.crop(session, k_real), expected[t.y : t.y + 32, t.x : t.x + 32])
    for k, trial in enumerate(session.trials):  # a person who is right 3 times in 4
        session = blind.record_guess(
            session, k, trial.source if k % 4 else ("synthetic" if trial.source == "real" else "real")
        )
    blind.save(session, tmp_path)
    result = blind.score(blind.load(tmp_path, session.id))
    assert result["answered"] == 20 and result["correct"] == 15
    assert result["accuracy"]["low"] < 0.75 < result["accuracy"]["high"]
    saved = (tmp_path / f"blind-{session.id}.json").read_text()
    assert "images" not in saved and len(saved) < 20_000  # indices and truth only, no pixels


def test_bad_guesses_and_sizes_are_refused(sets: tuple[Path, Path]) -> None:
    syn, real = sets
    with pytest.raises(UsageError, match="2..400 trials"):
        blind.new_session(syn, real, 1)
    session = blind.new_session(syn, real, 4, seed=0)
    with pytest.raises(UsageError, match="'real' or 'synthetic'"):
        blind.record_guess(session, 0, "maybe")
    with pytest.raises(UsageError, match="trial 9 does not exist"):
        blind.record_guess(session, 9, "real")
