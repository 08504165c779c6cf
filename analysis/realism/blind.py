"""Blind-test bookkeeping: shuffled real and synthetic crops, a person's guesses, the accuracy.

A session draws ``n`` trials, half real (from real-dev) and half synthetic, in a seeded random
order; each trial is a crop (split, image index, top-left corner, side). The session file lives
under ``<home>/runs/blind/<id>/people/`` (people only) and holds indices and the truth, never
pixels. ``crop(k)`` returns the pixels of trial ``k`` for the console page that shows it to a
person: that page is the only place a real crop appears. ``score`` gives the person's accuracy
with a Wilson interval; near 0.5 means they could not tell real from synthetic.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Literal, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from analysis.realism.report import load_real
from segfactory.errors import UsageError
from segfactory.files import write_atomic
from segfactory.stats import wilson_interval
from synthetic.splits import read_split

CROP_PX = 32  # side of a shown crop, pixels (the whole image when smaller)
MAX_TRIALS = 400  # trials per session; past this a session is refused
Source = Literal["real", "synthetic"]


class Trial(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: Source
    index: int = Field(ge=0)
    y: int = Field(ge=0)
    x: int = Field(ge=0)
    guess: Source | None = None


class BlindSession(BaseModel):
    """One person's blind test; ``trials`` hold the truth, so the file is for people only."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    id: str
    synthetic: str  # split folder paths
    real: str
    side: int
    trials: list[Trial]


def _corners(shape: tuple[int, ...], side: int, rng: np.random.Generator) -> tuple[int, int]:
    return int(rng.integers(0, shape[0] - side + 1)), int(rng.integers(0, shape[1] - side + 1))


def new_session(synthetic_dir: Path, real_dir: Path, n: int, seed: int | None = None) -> BlindSession:
    """``n`` shuffled trials (n // 2 real, the rest synthetic) over the two splits."""

    if n < 2 or n > MAX_TRIALS:
        raise UsageError(f"a blind test needs 2..{MAX_TRIALS} trials; got {n}")
    real, syn = load_real(real_dir), read_split(synthetic_dir, mmap=True)
    side = min(CROP_PX, *real.images.shape[1:], *syn.images.shape[1:])
    rng = np.random.default_rng(seed)
    trials = []
    for source, split, count in (("real", real, n // 2), ("synthetic", syn, n - n // 2)):
        for index in rng.choice(len(split), count, replace=count > len(split)):
            y, x = _corners(split.images.shape[1:], side, rng)
            trials.append(Trial(source=source, index=int(index), y=y, x=x))
    order = rng.permutation(len(trials))
    return BlindSession(
        id=secrets.token_hex(6),
        synthetic=str(synthetic_dir),
        real=str(real.path),
        side=side,
        trials=[trials[i] for i in order],
    )


def crop(session: BlindSession, k: int) -> np.ndarray:
    """Pixels of trial ``k`` (float32, side x side) for the person's screen only."""
    trial = session.trials[k]
    split = read_split(Path(session.real if trial.source == "real" else session.synthetic), mmap=True)
    out: np.ndarray = np.array(
        split.images[trial.index, trial.y : trial.y + session.side, trial.x : trial.x + session.side],
        dtype=np.float32,
    )
    return out


def record_guess(session: BlindSession, k: int, guess: str) -> BlindSession:
    if guess not in ("real", "synthetic"):
        raise UsageError(f"a guess is 'real' or 'synthetic'; got {guess!r}")
    if not 0 <= k < len(session.trials):
        raise UsageError(f"trial {k} does not exist; the session has {len(session.trials)}")
    trials = list(session.trials)
    trials[k] = trials[k].model_copy(update={"guess": guess})
    return session.model_copy(update={"trials": trials})


class BlindScore(TypedDict):
    """A session's result: aggregates only, never a trial's truth."""

    id: str
    answered: int
    trials: int
    correct: int
    accuracy: dict[str, float]  # a Wilson interval (segfactory.stats.Interval.as_dict)
    chance: float


def score(session: BlindSession) -> BlindScore:
    """Accuracy over the answered trials with a 95% Wilson interval (aggregates only)."""

    answered = [t for t in session.trials if t.guess is not None]
    correct = sum(t.guess == t.source for t in answered)
    return {
        "id": session.id,
        "answered": len(answered),
        "trials": len(session.trials),
        "correct": correct,
        "accuracy": wilson_interval(correct, len(answered)).as_dict(),
        "chance": 0.5,
    }


def session_path(people_dir: Path, session_id: str) -> Path:
    return people_dir / f"blind-{session_id}.json"


def save(session: BlindSession, people_dir: Path) -> Path:
    people_dir.mkdir(parents=True, exist_ok=True)
    path = session_path(people_dir, session.id)
    write_atomic(path, session.model_dump_json(indent=1))
    return path


def load(people_dir: Path, session_id: str) -> BlindSession:
    path = session_path(people_dir, session_id)
    if not path.is_file():
        raise UsageError(f"no blind session {session_id!r} under {people_dir}")
    return BlindSession.model_validate(json.loads(path.read_text()))
