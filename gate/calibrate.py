"""The gate's one answer time, fixed at its start from its own measured verdict time.

Before a served gate answers anything, it times one verdict of a fixed reference pair on the path
every submission takes (``measure``): the pinned-code check, the confined intake of the reference
candidate, the leakage check of the largest approved training set, the verdict-cache lookup, the
confined intake of the reference best, and both models scored afresh by the confined scorer on the
clean and perturbed images of the confirm tier it answers on (the larger of confirm-a and
confirm-b, with that version's pinned provider), then the win rule. No query is recorded and no
budget is spent.

Both models are built by ``segfactory init`` from the gate's own code, never by an agent: the
reference best is the baseline init registered as the first best; the reference candidate is the
profile's base training config's model with seeded weights (``gate.setup.register_reference``),
since a run's candidates patch that config and cost about what it costs to score. So the answer
time says nothing about any submitted model, and it is fixed before the first submission arrives.

    answer time = max(ANSWER_TIME_FLOOR_S, ANSWER_TIME_MULTIPLE x measured), rounded up to
    ANSWER_TIME_STEP_S

That is the answer time of a submission costing what the reference pair cost to score; each
submission's own is scaled by its scoring cost (its candidate's and the current best's, counted
from their bytes at intake) against the reference pair's (``AnswerTime.for_costs``): a packaged
ensemble with flip views, or a candidate judged against a best that must be scored afresh, gets
the time its scoring needs, and no answer's time depends on a verdict or on what is cached.

An override (``gate serve --answer-time``, else ``$SEGFACTORY_GATE_ANSWER_TIME``) is a number of
seconds (``600``) or a multiple of the measured time (``2x``). One below the measured verdict time,
or zero, is refused with the measured figure named, and the gate does not start; so is a gate that
cannot measure itself (no reference model, a scoring error). The result is an ``AnswerTime``,
recorded in the ledger (``answer_times``) and shown by ``gate status``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gate import tiers
from gate.intake import inspect_bytes, inspect_model
from gate.leakage import LeakError, check_training_data
from gate.replies import AnswerSource, AnswerTime
from segfactory.errors import GateError
from segfactory.records import Tier
from synthetic.splits import read_split
from synthetic.versions import approved

if TYPE_CHECKING:  # the gate passes itself in; gate.core imports nothing from here
    from gate.core import Gate

log = logging.getLogger(__name__)

# The reference verdict is a run's first one: the baseline as best, a base-config candidate, both
# scored. What a later submission costs (a wider candidate, a best that must be scored afresh, an
# ensemble) is counted and scales its answer time (``AnswerTime.for_costs``); this multiple is the
# room left for the machine: the scorer slowed by tickets training beside it, page-cache misses.
ANSWER_TIME_MULTIPLE = 2.0
# On a small tier or a fast GPU a verdict takes a second or two, and three times that leaves no room
# for delays that do not scale with it (a page-cache miss after a rotation, a leakage check of a
# larger dataset than the reference's, a pause of the host). Ten seconds cost little where verdicts
# are that quick.
ANSWER_TIME_FLOOR_S = 10.0
# The calibrated answer time is rounded up to whole seconds: a coarse function of the measured
# figure, so the millisecond share of a verdict's time that the held-back labels move (the metrics
# count components) does not show in it; the machine's load moves it by far more anyway.
ANSWER_TIME_STEP_S = 1.0
# A reference verdict slower than this refuses the start: a gate that needs a quarter of an hour per
# verdict cannot answer a run usefully (and a client waits at most this long for a gate to start).
CALIBRATION_WALL_S = 900.0
ANSWER_TIME_ENV = "SEGFACTORY_GATE_ANSWER_TIME"  # an override, as --answer-time, when the flag is not given
META_REFERENCE = "reference_model_sha256"  # ledger meta: the reference candidate init registered
REFERENCE_DIR = "reference"  # vault/reference/<sha256>.onnx
ANSWERED_TIERS = (Tier.CONFIRM_A.value, Tier.CONFIRM_B.value)
_OVERRIDE = re.compile(r"^(?P<value>\d+(?:\.\d*)?|\.\d+)(?P<multiple>x)?$")


class CalibrationError(GateError):
    """The gate cannot fix its answer time (no reference, a scoring error, a refused override):
    it does not start."""


@dataclass(frozen=True)
class Override:
    """An answer time a person asked for: seconds, or a multiple of the measured verdict time."""

    text: str
    source: AnswerSource  # flag | env
    seconds: float | None = None
    multiple: float | None = None


@dataclass(frozen=True)
class Measured:
    """One timed reference verdict."""

    seconds: float
    tier: str
    version: int
    reference_sha256: str
    cost: int | None = None  # the reference pair's scoring cost (candidate plus best), None: not counted


def parse_override(text: str, source: AnswerSource) -> Override:
    """``600`` (seconds) or ``2x`` (times the measured verdict time); CalibrationError for anything
    else, before any measuring."""
    where = "--answer-time" if source == "flag" else f"${ANSWER_TIME_ENV}"
    match = _OVERRIDE.match(text.strip())
    if match is None:
        raise CalibrationError(
            f"{where}={text!r} is not a number of seconds (e.g. 600) or a multiple of the measured "
            "verdict time (e.g. 2x)"
        )
    value = float(match["value"])
    if match["multiple"]:
        return Override(text=text.strip(), source=source, multiple=value)
    return Override(text=text.strip(), source=source, seconds=value)


def requested_override(flag: str | None, environ: dict[str, str] | None = None) -> Override | None:
    """The override in force: the flag's, else the environment's, else None (calibrated)."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return parse_override(flag, "flag")
    if env.get(ANSWER_TIME_ENV):
        return parse_override(env[ANSWER_TIME_ENV], "env")
    return None


def fix_answer_time(gate: Gate, override: Override | None) -> AnswerTime:
    """Measure, derive the answer time (or check the override against the measured time) and
    record it in the ledger. Raises CalibrationError: the gate must not start."""
    measured = measure(gate)
    answer = derive(measured, override)
    gate.ledger.record_answer_time(answer, os.getpid())
    gate.ledger.queue_event("gate.answer_time", answer.as_json())
    log.info(
        "gate answer time %.0f s (%s; reference verdict %.2f s)",
        answer.seconds,
        answer.source,
        measured.seconds,
    )
    return answer


def derive(measured: Measured, override: Override | None) -> AnswerTime:
    """The answer time from a measured reference verdict and the override, if any."""
    common = {
        "measured_verdict_s": round(measured.seconds, 3),
        "tier": measured.tier,
        "tier_version": measured.version,
        "reference_sha256": measured.reference_sha256,
        "started_at": time.time(),
        "reference_cost": measured.cost or None,  # 0 counts nothing: no scaling
    }
    if override is None:
        seconds = _round_up(max(ANSWER_TIME_FLOOR_S, ANSWER_TIME_MULTIPLE * measured.seconds))
        return AnswerTime(
            seconds=seconds,
            source="calibrated",
            multiple=ANSWER_TIME_MULTIPLE,
            floor_s=ANSWER_TIME_FLOOR_S,
            **common,
        )
    if override.multiple is not None:
        seconds = _round_up(override.multiple * measured.seconds)
    else:
        seconds = float(override.seconds or 0.0)
    if seconds <= 0 or seconds < measured.seconds:
        raise CalibrationError(
            f"answer time {override.text} ({override.source}) is {seconds:g} s, below this gate's "
            f"measured verdict time of {measured.seconds:.2f} s (reference verdict on "
            f"{measured.tier} v{measured.version}); an answer that leaves before its verdict is "
            f"reached would always be an INVALID overrun. Give at least {math.ceil(measured.seconds)} s "
            f"or 1x, or leave it unset ({ANSWER_TIME_MULTIPLE:g}x, at least {ANSWER_TIME_FLOOR_S:g} s)"
        )
    return AnswerTime(
        seconds=seconds, source=override.source, requested=override.text, multiple=override.multiple, **common
    )


def _round_up(seconds: float) -> float:
    return float(math.ceil(seconds / ANSWER_TIME_STEP_S) * ANSWER_TIME_STEP_S)


def measure(gate: Gate) -> Measured:
    """Time one verdict of the reference pair (see the module docstring). Raises CalibrationError."""
    candidate, reference_sha = reference_candidate(gate.vault, gate.ledger.get_meta(META_REFERENCE))
    best_path = reference_best(gate)
    tier, version = answered_tier(gate.vault)
    train = largest_approved(gate.home_root)
    started = time.monotonic()
    try:
        rule = gate.rule()
        if gate.integrity_check is not None:
            gate.integrity_check()
        checked = inspect_bytes(candidate)
        best = inspect_model(best_path)
        if train is not None:
            try:
                check_training_data(gate.home_root, gate.vault, train)
            except LeakError as exc:  # the real submission's check would quarantine; this one only times
                log.warning("the reference leakage check of %s found a leak: %s", train, exc)
        gate.ledger.cached_verdict(checked.sha256, tier, version, "")
        gate.compare(checked, tier, version, rule, best=best)
    except Exception as exc:  # noqa: BLE001 - whatever stops the reference verdict stops the start
        raise CalibrationError(
            f"the gate cannot measure its verdict time on {tier} v{version}, so it does not start: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    took = time.monotonic() - started
    if took > CALIBRATION_WALL_S:
        raise CalibrationError(
            f"the reference verdict on {tier} v{version} took {took:.0f} s, past CALIBRATION_WALL_S="
            f"{CALIBRATION_WALL_S:g}; this machine cannot answer in useful time (too loaded, or the "
            "tier too large for its device)"
        )
    cost = None if checked.cost is None or best.cost is None else checked.cost + best.cost
    return Measured(seconds=took, tier=tier, version=version, reference_sha256=reference_sha, cost=cost)


def reference_candidate(vault: Path, sha256: str | None) -> tuple[bytes, str]:
    """The reference candidate's bytes, checked against the hash init recorded."""
    if sha256 is None:
        raise CalibrationError(
            "no reference model is registered in this vault (a home made before the gate calibrated "
            "its answer time); `segfactory gate serve` registers one for the home's profile, or "
            "re-create the home with `segfactory init`"
        )
    path = vault / REFERENCE_DIR / f"{sha256}.onnx"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CalibrationError(f"the reference model {path} cannot be read: {exc.strerror}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CalibrationError(
            f"the reference model {path} does not hash to the {sha256[:12]}… init recorded"
        )
    return data, sha256


def reference_best(gate: Gate) -> Path:
    """The model init registered as the first best (never a promoted, agent-made one)."""
    first = next((b for b in gate.ledger.best_history() if b["kind"] == "init"), None)
    if first is None:
        raise CalibrationError("no baseline was registered at init, so there is no reference best to time")
    return Path(first["model_path"])


def answered_tier(vault: Path) -> tuple[str, int]:
    """The confirm tier version with the most pixels (the slower verdict); confirm-a on a tie."""
    built = tiers.built_tiers(vault)
    sizes: list[tuple[int, int, str]] = []
    for order, tier in enumerate(ANSWERED_TIERS):
        if tier in built:
            _, split = tiers.read_tier(vault, tier, built[tier])
            sizes.append((int(split.images.size), -order, tier))
    if not sizes:
        raise CalibrationError(f"no confirm tier is built in {vault}; `segfactory init` builds them")
    tier = max(sizes)[2]
    return tier, built[tier]


def largest_approved(home_root: Path) -> str | None:
    """The approved dataset version with the most training images (the slowest leakage check)."""
    try:
        versions = approved(home_root)
    except Exception:  # noqa: BLE001 - an unreadable registry: time the verdict without the check
        log.warning(
            "the dataset registry of %s cannot be read; the reference verdict skips the leakage check",
            home_root,
        )
        return None
    sized = [(len(read_split(v.train, mmap=True)), v.ref) for v in versions if v.train.is_dir()]
    return max(sized)[1] if sized else None


__all__ = [
    "ANSWER_TIME_ENV",
    "ANSWER_TIME_FLOOR_S",
    "ANSWER_TIME_MULTIPLE",
    "ANSWER_TIME_STEP_S",
    "CALIBRATION_WALL_S",
    "CalibrationError",
    "Measured",
    "Override",
    "derive",
    "fix_answer_time",
    "measure",
    "parse_override",
    "requested_override",
]
